-- Least privilege for the sink's MySQL user. Replace `shop` with the target database,
-- `sink`@`%` with your user and host. Nothing here grants DDL: a DBA creates the
-- target table and the sink's tables (sql/wal_sink_tables.sql) beforehand, and
-- `wal-sink init-db` then finds them and creates nothing. Order matters: run this
-- after those tables exist, as MariaDB refuses a table-level GRANT on a table that
-- does not exist yet (error 1146) unless CREATE is among its privileges.
-- docs/security.md has the grants of every feature in one table.
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
-- With several target tables (mysql.route_column), the per-table counts beside each
-- ack row (and each routed target, as the target above):
GRANT SELECT, INSERT, DELETE ON shop.wal_sink_ack_tables TO 'sink'@'%';
-- With mysql.local_infile: each chunk is loaded into a session temporary table,
-- which only a database-level grant allows (without it the sink says so at start
-- and upserts with multi-row INSERTs):
-- GRANT CREATE TEMPORARY TABLES ON shop.* TO 'sink'@'%';
-- With [cdc] and mysql.version_column, the tombstone table of the target too
-- (created beforehand as in sql/wal_sink_tables.sql), e.g. for a target `items`:
-- GRANT SELECT, INSERT, UPDATE, DELETE ON shop.items_tombstones TO 'sink'@'%';
-- and with cdc.truncate_values its truncate table:
-- GRANT SELECT, INSERT, UPDATE ON shop.items_tombstones_truncate TO 'sink'@'%';
-- For a history (stored_as_scd_type = 2) `items`, its events table (made by the
-- job's first start when the grant includes CREATE):
-- GRANT SELECT, INSERT, UPDATE, DELETE ON shop.items_events TO 'sink'@'%';
-- (DELETE: with mysql.history_retention, purge folds events and a batch removes its
-- events at or below a key's floor)
-- Optional: TRIGGER on the target lets the sink see its triggers and refuse one that
-- rewrites the columns the stream writes (without it the server hides them, and the
-- sink says so at start). It also lets the user create and drop triggers there.
-- GRANT TRIGGER ON shop.kpxxb_hzb TO 'sink'@'%';
