-- Least privilege for the sink's MySQL user. Replace `shop` with the target database,
-- `sink`@`%` with your user and host. Nothing here grants DDL: a DBA creates the
-- target table and the sink's tables (sql/wal_sink_tables.sql) beforehand, and
-- `wal-sink init-db` then finds them and creates nothing.
--
-- The sink reads and upserts (and, with [cdc], deletes) target rows; it inserts and
-- completes ack rows, replaces them on a forced replay (and purge drops those of
-- purged batches), updates its lease row, passes rows set aside through the
-- outbox, and records what `wal-sink quarantine retry` applied in the retry table
-- (purge drops the rows of removed entries).
-- Reflection and preflight read information_schema, which shows the user its own
-- tables without further grants. tests/integration/test_faults.py runs a batch
-- with exactly these grants.

CREATE USER IF NOT EXISTS 'sink'@'%' IDENTIFIED BY 'change-me';
GRANT SELECT, INSERT, UPDATE, DELETE ON shop.kpxxb_hzb TO 'sink'@'%';
GRANT SELECT, INSERT, UPDATE, DELETE ON shop.wal_sink_ack TO 'sink'@'%';
GRANT SELECT, INSERT, UPDATE ON shop.wal_sink_lease TO 'sink'@'%';
GRANT SELECT, INSERT, DELETE ON shop.wal_sink_outbox TO 'sink'@'%';
GRANT SELECT, INSERT, UPDATE, DELETE ON shop.wal_sink_retry TO 'sink'@'%';
-- With [cdc] and mysql.version_column, the tombstone table of the target too
-- (created beforehand as in sql/wal_sink_tables.sql), e.g. for a target `items`:
-- GRANT SELECT, INSERT, UPDATE, DELETE ON shop.items_tombstones TO 'sink'@'%';
-- and with cdc.truncate_values its truncate table:
-- GRANT SELECT, INSERT, UPDATE ON shop.items_tombstones_truncate TO 'sink'@'%';
-- Optional: TRIGGER on the target lets the sink see its triggers and refuse one that
-- rewrites the columns the stream writes (without it the server hides them, and the
-- sink says so at start). It also lets the user create and drop triggers there.
-- GRANT TRIGGER ON shop.kpxxb_hzb TO 'sink'@'%';
