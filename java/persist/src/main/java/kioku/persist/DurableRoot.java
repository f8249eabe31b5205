package kioku.persist;

import java.lang.annotation.ElementType;
import java.lang.annotation.Retention;
import java.lang.annotation.RetentionPolicy;
import java.lang.annotation.Target;

/**
 * Marks a static reference field as a durable root: the object it holds, and every object
 * reachable from it, is persistent. Assigning a new value makes the new graph persistent
 * before the root changes on the medium.
 */
@Retention(RetentionPolicy.RUNTIME)
@Target(ElementType.FIELD)
public @interface DurableRoot {}
