-- From wal_sink 0.2 to 0.3, for DBAs whose sink user may not ALTER or CREATE (the job
-- and `wal-sink init-db` otherwise do this themselves). Default table names; replace
-- `shop` with the sink's database. From 0.1, run sql/upgrade_0.2.sql first.
--
-- An ack row says whether its batch was applied, or set aside whole into the
-- quarantine by `wal-sink quarantine-batch` (and never applied).
ALTER TABLE shop.wal_sink_ack ADD COLUMN state VARCHAR(16) NOT NULL DEFAULT 'applied';
--
-- Ack rows count the CDC upserts a newer delete made stale (skipped, not applied).
ALTER TABLE shop.wal_sink_ack ADD COLUMN skipped_count BIGINT NOT NULL DEFAULT 0;
-- With [cdc] and mysql.version_column: the target's tombstone table, whose key and
-- version columns are copied from the target. For a target `items` with
-- mysql.key = ["k"] and mysql.version_column = "seq" (replace the names):
--
-- CREATE TABLE IF NOT EXISTS shop.items_tombstones (
-- 	_wal_sink_id VARCHAR(128) NOT NULL, _wal_deleted_at DATETIME(6) NOT NULL,
-- 	PRIMARY KEY (_wal_sink_id, k), KEY wal_sink_expiry (_wal_sink_id, _wal_deleted_at)
-- ) ENGINE=InnoDB SELECT '' AS _wal_sink_id, k, seq AS _wal_version,
-- 	NOW(6) AS _wal_deleted_at FROM shop.items WHERE FALSE;
-- GRANT SELECT, INSERT, UPDATE, DELETE ON shop.items_tombstones TO 'sink'@'%';
