package kioku.persisttest.samples;

import java.util.ArrayList;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;

/** A bean as serialization frameworks see it: the replica word must stay invisible. */
@SuppressWarnings("serial") // deliberately: the agent must keep the default serialVersionUID
public class Pojo implements java.io.Serializable {
  private String name = "p";
  private int count = 3;
  private List<Double> values = new ArrayList<>(List.of(1.5, -2.0));
  private Map<String, Pojo> children = new LinkedHashMap<>();
  public transient int ignored = 5;

  public String getName() {
    return name;
  }

  public void setName(String name) {
    this.name = name;
  }

  public int getCount() {
    return count;
  }

  public void setCount(int count) {
    this.count = count;
  }

  public List<Double> getValues() {
    return values;
  }

  public void setValues(List<Double> values) {
    this.values = values;
  }

  public Map<String, Pojo> getChildren() {
    return children;
  }

  public void setChildren(Map<String, Pojo> children) {
    this.children = children;
  }

  public static Pojo sample() {
    Pojo p = new Pojo();
    Pojo c = new Pojo();
    c.setName("child");
    c.setCount(-1);
    p.getChildren().put("c", c);
    return p;
  }
}
