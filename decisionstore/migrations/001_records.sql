-- The input column's function (below): the input document of a record's
-- line, NULL when there is none, or when the line is JSON that jsonb cannot
-- hold (a string holding \u0000, a number past numeric's range, nesting
-- too deep for the parser). Such a record is still kept, exactly as
-- written; only the input filter cannot find it. IMMUTABLE as a generated
-- column needs: it reads nothing but its arguments.
CREATE FUNCTION arbiter_store.record_input(line text, path text) RETURNS jsonb
LANGUAGE plpgsql IMMUTABLE STRICT PARALLEL SAFE AS $$
BEGIN
  IF path LIKE '/v1/data/%' THEN
    RETURN line::jsonb->'input'->'input';
  END IF;
  RETURN line::jsonb->'input';
EXCEPTION WHEN data_exception OR program_limit_exceeded THEN
  RETURN NULL;
END
$$;

-- The result column's: the record's result (a shadow outcome's: the
-- candidate's), NULL when there is none or jsonb cannot hold it.
CREATE FUNCTION arbiter_store.record_result(line text) RETURNS jsonb
LANGUAGE plpgsql IMMUTABLE STRICT PARALLEL SAFE AS $$
BEGIN
  RETURN COALESCE(line::jsonb->'result', line::jsonb->'shadow'->'result');
EXCEPTION WHEN data_exception OR program_limit_exceeded THEN
  RETURN NULL;
END
$$;

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
  -- The whole record, the file sink's line byte for byte (without its
  -- newline): text, not jsonb, which would keep only the last of duplicate
  -- keys and rewrite numbers and spaces, so that a body refused for them
  -- would read back as one the engine accepts.
  record      text NOT NULL,
  -- The input document as logged (masked), NULL when none: the record's
  -- input, or its input member on the Data API's path. Computed here from
  -- the record, so that the writer neither parses nor sends it twice.
  input       jsonb GENERATED ALWAYS AS (arbiter_store.record_input(record, path)) STORED,
  -- The result as answered, for queries by its members.
  result      jsonb GENERATED ALWAYS AS (arbiter_store.record_result(record)) STORED,
  -- The key makes a retried batch write each record once. Its first column
  -- also serves lookups by decision id.
  PRIMARY KEY (decision_id, kind, revision, time)
) PARTITION BY RANGE (time);

-- On the partitioned table, so that each partition gets them.
CREATE INDEX records_time ON arbiter_store.records (time DESC);
CREATE INDEX records_decision_time ON arbiter_store.records (decision, time DESC);
CREATE INDEX records_replica_time ON arbiter_store.records (replica, time DESC);
CREATE INDEX records_input ON arbiter_store.records USING GIN (input jsonb_path_ops);
