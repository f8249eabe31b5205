package kioku.bench.persist;

import java.util.ArrayList;
import java.util.List;
import java.util.Random;

/**
 * The JSON workload's document: an order book of plain beans (private fields, getters and
 * setters, so Jackson writes them through the setters, which the agent instruments).
 */
public final class Orders {
  private String market;
  private long generatedAt;
  private List<Order> orders = new ArrayList<>();

  public String getMarket() { return market; }
  public void setMarket(String market) { this.market = market; }
  public long getGeneratedAt() { return generatedAt; }
  public void setGeneratedAt(long generatedAt) { this.generatedAt = generatedAt; }
  public List<Order> getOrders() { return orders; }
  public void setOrders(List<Order> orders) { this.orders = orders; }

  public static final class Order {
    private long id;
    private String customer;
    private String status;
    private double total;
    private boolean priority;
    private List<String> tags = new ArrayList<>();
    private List<Line> lines = new ArrayList<>();
    private Address shipTo;

    public long getId() { return id; }
    public void setId(long id) { this.id = id; }
    public String getCustomer() { return customer; }
    public void setCustomer(String customer) { this.customer = customer; }
    public String getStatus() { return status; }
    public void setStatus(String status) { this.status = status; }
    public double getTotal() { return total; }
    public void setTotal(double total) { this.total = total; }
    public boolean isPriority() { return priority; }
    public void setPriority(boolean priority) { this.priority = priority; }
    public List<String> getTags() { return tags; }
    public void setTags(List<String> tags) { this.tags = tags; }
    public List<Line> getLines() { return lines; }
    public void setLines(List<Line> lines) { this.lines = lines; }
    public Address getShipTo() { return shipTo; }
    public void setShipTo(Address shipTo) { this.shipTo = shipTo; }
  }

  public static final class Line {
    private String sku;
    private int quantity;
    private double unitPrice;

    public String getSku() { return sku; }
    public void setSku(String sku) { this.sku = sku; }
    public int getQuantity() { return quantity; }
    public void setQuantity(int quantity) { this.quantity = quantity; }
    public double getUnitPrice() { return unitPrice; }
    public void setUnitPrice(double unitPrice) { this.unitPrice = unitPrice; }
  }

  public static final class Address {
    private String street;
    private String city;
    private String postcode;
    private String country;

    public String getStreet() { return street; }
    public void setStreet(String street) { this.street = street; }
    public String getCity() { return city; }
    public void setCity(String city) { this.city = city; }
    public String getPostcode() { return postcode; }
    public void setPostcode(String postcode) { this.postcode = postcode; }
    public String getCountry() { return country; }
    public void setCountry(String country) { this.country = country; }
  }

  /** A deterministic book of {@code n} orders. */
  static Orders generate(int n, long seed) {
    Random r = new Random(seed);
    String[] voc = Texts.vocabulary(500, seed);
    String[] statuses = {"new", "paid", "packed", "shipped", "delivered", "returned"};
    Orders book = new Orders();
    book.setMarket("eu-west");
    book.setGeneratedAt(1_700_000_000_000L);
    for (int i = 0; i < n; i++) {
      Order o = new Order();
      o.setId(100_000 + i);
      o.setCustomer(voc[r.nextInt(voc.length)] + " " + voc[r.nextInt(voc.length)]);
      o.setStatus(statuses[r.nextInt(statuses.length)]);
      o.setPriority(r.nextInt(5) == 0);
      int tags = r.nextInt(4);
      for (int t = 0; t < tags; t++) o.getTags().add(voc[r.nextInt(50)]);
      int lines = 1 + r.nextInt(6);
      double total = 0;
      for (int l = 0; l < lines; l++) {
        Line line = new Line();
        line.setSku("SKU-" + r.nextInt(100_000));
        line.setQuantity(1 + r.nextInt(20));
        line.setUnitPrice(Math.round(r.nextDouble() * 50_000) / 100.0);
        total += line.getQuantity() * line.getUnitPrice();
        o.getLines().add(line);
      }
      o.setTotal(Math.round(total * 100) / 100.0);
      Address a = new Address();
      a.setStreet(r.nextInt(300) + " " + voc[r.nextInt(voc.length)] + " street");
      a.setCity(voc[r.nextInt(100)]);
      a.setPostcode(String.format("%05d", r.nextInt(100_000)));
      a.setCountry(r.nextBoolean() ? "DE" : "FR");
      o.setShipTo(a);
      book.getOrders().add(o);
    }
    return book;
  }
}
