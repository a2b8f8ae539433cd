"""The effective-policies annotation (SPEC §3): its value, what a change affects, the cache of
values, and the explanation of one object's value."""
