-- 0020: a receipt may name the one notification it is about, as
-- store/sqlite's 0020: a receipt that names none applies only while
-- exactly one notification has its provider and message id.
ALTER TABLE receipts ADD COLUMN notification bigint;
