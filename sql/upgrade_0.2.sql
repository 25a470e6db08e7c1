-- From wal_sink 0.1 to 0.2, for DBAs whose sink user may not ALTER (the job and
-- `wal-sink init-db` otherwise do this themselves). Default table names; replace
-- `shop` with the sink's database.
--
-- Ack rows name the apply that wrote them (quarantine entries are keyed to it, and a
-- retry after a lost COMMIT reply recognises its own commit by it).
ALTER TABLE shop.wal_sink_ack ADD COLUMN apply_id CHAR(32) NULL;
-- Rows set aside travel to the quarantine Delta table through this outbox, written
-- in the batch's own transaction.
CREATE TABLE IF NOT EXISTS shop.wal_sink_outbox (
	id BIGINT NOT NULL AUTO_INCREMENT,
	sink_id VARCHAR(128) NOT NULL,
	apply_id CHAR(32) NOT NULL,
	batch_id BIGINT NOT NULL,
	reason TEXT NOT NULL,
	record LONGTEXT NOT NULL,
	recorded_at DATETIME(6) NOT NULL,
	PRIMARY KEY (id)
)ENGINE=InnoDB;
CREATE INDEX wal_sink_outbox_sink ON shop.wal_sink_outbox (sink_id, id);
GRANT SELECT, INSERT, DELETE ON shop.wal_sink_outbox TO 'sink'@'%';
