-- Target of conf/invoices.toml and conf/invoices_files.toml: running invoice totals
-- per tax office and invoice status, added to once per finalised 2-second window.
CREATE TABLE IF NOT EXISTS kpxxb_hzb (
	swjg_dm VARCHAR(16) NOT NULL COMMENT 'tax office code (SWJG_DM)',
	fpzt VARCHAR(4) NOT NULL COMMENT 'invoice status (FPZT)',
	hjje DECIMAL(20,2) NOT NULL DEFAULT 0 COMMENT 'total amount: sum of JE',
	fs BIGINT NOT NULL DEFAULT 0 COMMENT 'number of invoices',
	PRIMARY KEY (swjg_dm, fpzt)
) ENGINE=InnoDB;
