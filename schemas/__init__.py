"""Table schemas of a statelake store, as JSON: the single source every engine reads."""
