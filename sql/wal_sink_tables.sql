-- wal_sink's own tables, with the default names (mysql.ack_table, mysql.lease_table,
-- mysql.outbox_table). `wal-sink init-db` and the job create them; this file is for
-- DBAs who create tables by hand. tests/unit/test_schema.py keeps it equal to
-- wal_sink/mysql/tables.py. Upgrading: sql/upgrade_0.2.sql (from 0.1), then
-- sql/upgrade_0.3.sql.

-- One row per applied batch, inserted first in the batch's own transaction (its
-- primary key stops a second apply) and completed with the counts before COMMIT.
-- apply_id names the apply that wrote it (its quarantine entries carry it too);
-- state is 'applied', or 'quarantined' for a batch `wal-sink quarantine-batch` set
-- aside whole (its rows are in the quarantine table, none in the target).
CREATE TABLE IF NOT EXISTS wal_sink_ack (
	sink_id VARCHAR(128) NOT NULL,
	batch_id BIGINT NOT NULL,
	row_count BIGINT NOT NULL,
	deleted_count BIGINT NOT NULL,
	quarantined BIGINT NOT NULL,
	epoch BIGINT NOT NULL,
	committed_at DATETIME(6) NOT NULL,
	apply_id CHAR(32),
	state VARCHAR(16) NOT NULL DEFAULT 'applied',
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

-- Rows a batch set aside, written in its own transaction; they leave for the
-- quarantine Delta table right after COMMIT.
CREATE TABLE IF NOT EXISTS wal_sink_outbox (
	id BIGINT NOT NULL AUTO_INCREMENT,
	sink_id VARCHAR(128) NOT NULL,
	apply_id CHAR(32) NOT NULL,
	batch_id BIGINT NOT NULL,
	reason TEXT NOT NULL,
	record LONGTEXT NOT NULL,
	recorded_at DATETIME(6) NOT NULL,
	PRIMARY KEY (id)
)ENGINE=InnoDB;

CREATE INDEX IF NOT EXISTS wal_sink_outbox_sink ON wal_sink_outbox (sink_id, id);
