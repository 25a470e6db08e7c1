"""Private servers (MariaDB, Kafka) and the demo, for tests and `make demo`; not part
of the installed library."""
