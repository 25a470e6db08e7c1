-- From wal_sink 0.4 to 0.5, for DBAs whose sink user may not ALTER the tombstone
-- tables (the job and `wal-sink init-db` otherwise do this themselves, under a named
-- lock, at their first start). Only with [cdc] and mysql.version_column. Default
-- names; replace `shop` with the sink's database, `items` with the target and `k`
-- with mysql.key's columns.
--
-- Tombstones now belong to the target, not to one sink: keyed by the target's key,
-- each key keeping its newest tombstone, and named by the table's comment.
DELETE a FROM shop.items_tombstones a JOIN shop.items_tombstones b ON a.k = b.k
	AND (a._wal_version < b._wal_version OR (a._wal_version = b._wal_version
	AND a._wal_sink_id > b._wal_sink_id));
ALTER TABLE shop.items_tombstones DROP PRIMARY KEY, ADD PRIMARY KEY (k),
	COMMENT = 'wal_sink tombstones of items';
