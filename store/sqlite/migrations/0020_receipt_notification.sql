-- 0020: a receipt may name the one notification it is about (a bounce or
-- complaint an app reports about its own notification). A receipt that
-- names none applies only while exactly one notification has its provider
-- and message id: two notifications that providers numbered alike (two
-- customers' webhook servers answering "1") are neither one's.
ALTER TABLE receipts ADD COLUMN notification INTEGER;
