-- The decision store's records: one row per record of the decision-record
-- pipeline (decisions answered or refused, shadow outcomes, promotions),
-- partitioned by UTC day so that retention drops whole partitions. The
-- partitions (records_YYYYMMDD) are created by the writer, ahead and on
-- demand, not here.
CREATE TABLE arbiter_store.records (
  time        timestamptz NOT NULL,         -- Record.Time
  decision_id text NOT NULL,
  kind        text NOT NULL,                -- 'decision' (answered, or refused: error_code set), 'shadow', 'promotion'
  replica     text NOT NULL,                -- the writer's --replica-id
  decision    text NOT NULL DEFAULT '',     -- Record.Decision, the decision's name
  path        text NOT NULL DEFAULT '',
  revision    text NOT NULL DEFAULT '',     -- Record.Revision; for kind shadow the candidate's revision
  caller      text NOT NULL DEFAULT '',
  outcome     text NOT NULL DEFAULT '',     -- Record.Summary's outcome
  reasons     text[] NOT NULL DEFAULT '{}', -- Record.Summary's reasons
  error_code  text NOT NULL DEFAULT '',
  duration_ns bigint NOT NULL DEFAULT 0,
  record      jsonb NOT NULL,               -- the whole record, as the file sink writes its line
  -- The input document as logged (masked), NULL when none: the record's
  -- input, or its input member on the Data API's path. Computed here from
  -- the record, so that the writer neither parses nor sends it twice.
  input       jsonb GENERATED ALWAYS AS (CASE WHEN path LIKE '/v1/data/%' THEN record->'input'->'input' ELSE record->'input' END) STORED,
  -- The key makes a retried batch write each record once. Its first column
  -- also serves lookups by decision id.
  PRIMARY KEY (decision_id, kind, revision, time)
) PARTITION BY RANGE (time);

-- On the partitioned table, so that each partition gets them.
CREATE INDEX records_time ON arbiter_store.records (time DESC);
CREATE INDEX records_decision_time ON arbiter_store.records (decision, time DESC);
CREATE INDEX records_replica_time ON arbiter_store.records (replica, time DESC);
CREATE INDEX records_input ON arbiter_store.records USING GIN (input jsonb_path_ops);
