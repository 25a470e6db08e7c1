-- wal_sink's own tables, with the default names (mysql.ack_table, mysql.lease_table).
-- `wal-sink init-db` and the job create them; this file is for DBAs who create
-- tables by hand. tests/unit/test_schema.py keeps it equal to wal_sink/schema.py.

-- One row per applied batch, inserted first in the batch's own transaction (its
-- primary key stops a second apply) and completed with the counts before COMMIT.
CREATE TABLE IF NOT EXISTS wal_sink_ack (
	sink_id VARCHAR(128) NOT NULL,
	batch_id BIGINT NOT NULL,
	row_count BIGINT NOT NULL,
	deleted_count BIGINT NOT NULL,
	quarantined BIGINT NOT NULL,
	epoch BIGINT NOT NULL,
	committed_at DATETIME(6) NOT NULL,
	PRIMARY KEY (sink_id, batch_id)
)ENGINE=InnoDB;

-- One row per sink: the fencing epoch grows by one each time an instance starts.
CREATE TABLE IF NOT EXISTS wal_sink_lease (
	sink_id VARCHAR(128) NOT NULL,
	epoch BIGINT NOT NULL,
	holder VARCHAR(255) NOT NULL,
	acquired_at DATETIME(6) NOT NULL,
	PRIMARY KEY (sink_id)
)ENGINE=InnoDB;
