-- wal_sink's own tables, with the default names (mysql.ack_table, mysql.lease_table,
-- mysql.outbox_table, mysql.retry_table). `wal-sink init-db` and the job create them;
-- this file is for DBAs who create tables by hand. tests/unit/test_schema.py keeps it
-- equal to wal_sink/mysql/tables.py. Upgrading from 0.1: sql/upgrade_0.2.sql, then
-- sql/upgrade_0.3.sql, sql/upgrade_0.4.sql and sql/upgrade_0.5.sql; from 0.2: the
-- last three; from 0.3: the last two; from 0.4: sql/upgrade_0.5.sql.

-- One row per applied batch, inserted first in the batch's own transaction (its
-- primary key stops a second apply) and completed with the counts before COMMIT.
-- apply_id names the apply that wrote it (its quarantine entries carry it too);
-- state is 'applied', or 'quarantined' for a batch `wal-sink quarantine-batch` set
-- aside whole (its rows are in the quarantine table, none in the target).
-- skipped_count counts CDC upserts a newer delete made stale.
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
	skipped_count BIGINT NOT NULL DEFAULT '0',
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

-- One row per quarantine entry `wal-sink quarantine retry` touched, written in the
-- retry's own transaction: state 'retried' (applied, exactly once) or 'failed'
-- (refused again, with the new reason; still open). entry_id is the entry's id in
-- the quarantine table; retry_id names the retry transaction.
CREATE TABLE IF NOT EXISTS wal_sink_retry (
	sink_id VARCHAR(128) NOT NULL,
	entry_id VARCHAR(96) NOT NULL,
	batch_id BIGINT NOT NULL,
	state VARCHAR(16) NOT NULL,
	retry_id CHAR(32) NOT NULL,
	reason TEXT,
	retried_at DATETIME(6) NOT NULL,
	PRIMARY KEY (sink_id, entry_id)
)ENGINE=InnoDB;

-- With several target tables (mysql.route_column): per-table counts of each applied
-- batch, written in the batch's own transaction beside its ack row (table_name ''
-- counts the rows whose route named no table).
CREATE TABLE IF NOT EXISTS wal_sink_ack_tables (
	sink_id VARCHAR(128) NOT NULL,
	batch_id BIGINT NOT NULL,
	table_name VARCHAR(64) NOT NULL,
	row_count BIGINT NOT NULL,
	deleted_count BIGINT NOT NULL,
	quarantined BIGINT NOT NULL,
	skipped_count BIGINT NOT NULL,
	PRIMARY KEY (sink_id, batch_id, table_name)
)ENGINE=InnoDB;

-- With [cdc] and mysql.version_column, also a tombstone table per target (default
-- name: the target's + "_tombstones"): a delete leaves its key and version there, so
-- an older upsert arriving later, from this sink or another writing the same target,
-- never brings the row back. Its key and version columns are copied from the target
-- (types and collations), hence CREATE TABLE ... SELECT; its primary key is the
-- target's key (tombstones belong to the target), and its comment names the target,
-- which is how every sink finds it. For a target `items` with mysql.key = ["k"] and
-- version_column "seq":
--
-- CREATE TABLE IF NOT EXISTS items_tombstones (
-- 	_wal_sink_id VARCHAR(128) NOT NULL, _wal_deleted_at DATETIME(6) NOT NULL,
-- 	PRIMARY KEY (k), KEY wal_sink_expiry (_wal_sink_id, _wal_deleted_at)
-- ) ENGINE=InnoDB COMMENT='wal_sink tombstones of items'
-- 	SELECT '' AS _wal_sink_id, k, seq AS _wal_version,
-- 	NOW(6) AS _wal_deleted_at FROM items WHERE FALSE;
--
-- With cdc.truncate_values, beside it the truncate table (the tombstone table's
-- name + "_truncate"): one row per target, the newest truncate's version, which
-- keeps older upserts out of the whole table:
--
-- CREATE TABLE IF NOT EXISTS items_tombstones_truncate (
-- 	_wal_table VARCHAR(64) NOT NULL, _wal_sink_id VARCHAR(128) NOT NULL,
-- 	_wal_truncated_at DATETIME(6) NOT NULL, PRIMARY KEY (_wal_table)
-- ) ENGINE=InnoDB COMMENT='wal_sink truncates of items'
-- 	SELECT '' AS _wal_table, '' AS _wal_sink_id, seq AS _wal_version,
-- 	NOW(6) AS _wal_truncated_at FROM items WHERE FALSE;
