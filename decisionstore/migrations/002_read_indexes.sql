-- The pages' filters that the first migration's indexes leave to a scan:
-- a rare outcome, caller, reason or error code would read every row of
-- the store to find none (seconds at a million rows). Each index keeps
-- the newest first, so a page of a common value stops after its rows.
CREATE INDEX records_outcome_time ON arbiter_store.records (outcome, time DESC);
CREATE INDEX records_caller_time ON arbiter_store.records (caller, time DESC);
-- Refused inputs only: most rows have no error code.
CREATE INDEX records_error_time ON arbiter_store.records (error_code, time DESC) WHERE error_code <> '';
CREATE INDEX records_reasons ON arbiter_store.records USING GIN (reasons);
