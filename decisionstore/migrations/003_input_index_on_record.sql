-- The input and result were stored columns generated from the record:
-- each row held its input and result twice (as text in record, as jsonb
-- beside it), and writing a row cost a PL/pgSQL call with an exception
-- block and a parse of the whole line per column. 100,000 records of a
-- Runner state (about 2 KB each) took 12.7 s to COPY in with them, 7.3 s
-- with the input's GIN index on the same function of the record instead
-- (docs/DECISION-STORE.md, "What a write costs"). The input filter's
-- index is now on the expression, which the database computes once, for
-- the index, and stores nowhere else; the reader's input filter is the
-- same expression. Nothing read the result column: it goes, and the view
-- below gives both to ad-hoc queries under their old names.
--
-- On a store that holds rows already, building the index reads each one
-- (3.8 s for 100,000 rows of 2 KB on a 2-core machine), under the advisory
-- lock: the replicas' sinks queue meanwhile, as during any outage.
-- Queries call the functions now, not only writes: a function with an
-- exception block cannot run in a parallel plan (it starts a
-- subtransaction: "cannot start subtransactions during a parallel
-- operation"), so they say so, and the planner keeps such a query serial.
ALTER FUNCTION arbiter_store.record_input(text, text) PARALLEL UNSAFE;
ALTER FUNCTION arbiter_store.record_result(text) PARALLEL UNSAFE;

ALTER TABLE arbiter_store.records DROP COLUMN input, DROP COLUMN result;

CREATE INDEX records_input ON arbiter_store.records
  USING GIN (arbiter_store.record_input(record, path) jsonb_path_ops);

-- The records with their input and result as jsonb, for SQL by hand:
-- SELECT ... FROM arbiter_store.records_json WHERE input @> '{"run":{"runId":"run-7f3a"}}'
-- uses the index above (the view's input is its expression).
CREATE VIEW arbiter_store.records_json AS
  SELECT r.*, arbiter_store.record_input(r.record, r.path) AS input,
    arbiter_store.record_result(r.record) AS result
  FROM arbiter_store.records AS r;
