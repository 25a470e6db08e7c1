-- From wal_sink 0.2 to 0.3, for DBAs whose sink user may not ALTER (the job and
-- `wal-sink init-db` otherwise do this themselves). Default table names; replace
-- `shop` with the sink's database. From 0.1, run sql/upgrade_0.2.sql first.
--
-- An ack row says whether its batch was applied, or set aside whole into the
-- quarantine by `wal-sink quarantine-batch` (and never applied).
ALTER TABLE shop.wal_sink_ack ADD COLUMN state VARCHAR(16) NOT NULL DEFAULT 'applied';
