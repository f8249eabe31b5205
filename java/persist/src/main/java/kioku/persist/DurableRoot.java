package kioku.persist;

import java.lang.annotation.ElementType;
import java.lang.annotation.Retention;
import java.lang.annotation.RetentionPolicy;
import java.lang.annotation.Target;

/**
 * Marks a static reference field as a durable root: the object it holds, and every object
 * reachable from it, is persistent. Assigning a new value makes the new graph persistent
 * before the root changes on the medium.
 *
 * <p>A root is found again by its class and field name. After renaming the field (or moving it
 * to another class), say what it was called, or the program refuses to start on a pool that
 * holds data under the old name: {@code @DurableRoot(formerly = "items")} (same class) or
 * {@code @DurableRoot(formerly = "com.example.Old#items")}. The agent option
 * {@code roots=Old#f>New#g;Gone#h>-} does the same from outside ({@code -}: drop the data).
 */
@Retention(RetentionPolicy.RUNTIME)
@Target(ElementType.FIELD)
public @interface DurableRoot {
  /** Names this root had before: a field name of the same class, or "binary.Class#field". */
  String[] formerly() default {};
}
