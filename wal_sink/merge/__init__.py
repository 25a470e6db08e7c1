"""How a record merges into a stored row, as objects users choose by name: the
merge modes. Imports none of the sink's other layers, so the config, the MySQL side
and the operator actions all reach the same objects."""
