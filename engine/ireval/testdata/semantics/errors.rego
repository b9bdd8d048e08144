# Errors topdown raises, that the compiled evaluation must raise or leave
# to topdown.
package semantics.errors

import rego.v1

# eval_conflict_error: a complete rule with two values.
conflict := input.a

conflict := input.b

# A function with two outputs for one input.
f(x) := 1 if x > 0

f(x) := 2 if x > 1

fconflict := f(input.a)

# Object keys must be unique.
obj[k] := v if some k, v in {"a": input.a, "b": input.b}

obj["a"] := input.b

# Strict builtin errors.
bad_number := to_number(input.s)

division := input.a / input.b

# Undefined versus false.
undefined_ref := input.missing.field

false_value := input.flag == true

negated_undefined if not input.missing

# topdown stops at the first body of a constant complete rule (early
# exit) and never reaches the error of the second one; the plan evaluates
# both: the compiled evaluation errs and topdown decides.
early if true

early if to_number("not a number") > 0
