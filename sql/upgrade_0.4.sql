-- From wal_sink 0.3 to 0.4, for DBAs whose sink user may not CREATE tables (the job
-- and `wal-sink init-db` otherwise do this themselves). Default table names; replace
-- `shop` with the sink's database and 'sink'@'%' with the sink's user. From 0.2, run
-- sql/upgrade_0.3.sql first.
--
-- The retry table: one row per quarantine entry `wal-sink quarantine retry` applied
-- ('retried') or saw refused again ('failed'), written in the retry's transaction.
CREATE TABLE IF NOT EXISTS shop.wal_sink_retry (
	sink_id VARCHAR(128) NOT NULL,
	entry_id VARCHAR(96) NOT NULL,
	batch_id BIGINT NOT NULL,
	state VARCHAR(16) NOT NULL,
	retry_id CHAR(32) NOT NULL,
	reason TEXT,
	retried_at DATETIME(6) NOT NULL,
	PRIMARY KEY (sink_id, entry_id)
) ENGINE=InnoDB;
GRANT SELECT, INSERT, UPDATE, DELETE ON shop.wal_sink_retry TO 'sink'@'%';
--
-- The quarantine Delta table gains the columns entry_id and entry_seq by itself, on
-- its next write; entries written before read them as null and get an id from their
-- stored fields.
