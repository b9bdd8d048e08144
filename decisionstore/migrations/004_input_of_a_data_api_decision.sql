-- The input column's function read a record on the Data API's path as the
-- body the caller sent, {"input": ...}, and took its input member. A
-- decision's record holds the input document the engine unwrapped, so for
-- every decision answered on /v1/data/ it found none: the input filter
-- missed those rows, and the pages showed them without a run. Only a
-- refused request's record (it has an error) holds the body as received
-- (decisionlog.Record.Wrapped says the same in Go). The line is parsed once.
CREATE OR REPLACE FUNCTION arbiter_store.record_input(line text, path text) RETURNS jsonb
LANGUAGE plpgsql IMMUTABLE STRICT PARALLEL UNSAFE AS $$
DECLARE
  doc jsonb;
BEGIN
  doc := line::jsonb;
  IF path LIKE '/v1/data/%' AND doc ? 'error' THEN
    RETURN doc->'input'->'input';
  END IF;
  RETURN doc->'input';
EXCEPTION WHEN data_exception OR program_limit_exceeded THEN
  RETURN NULL;
END
$$;

-- The index holds the function's old values: built again from every
-- record (as migration 3 did, under the migration lock).
DROP INDEX arbiter_store.records_input;
CREATE INDEX records_input ON arbiter_store.records
  USING GIN (arbiter_store.record_input(record, path) jsonb_path_ops);
