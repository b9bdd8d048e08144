# Exact integers at and beyond the u64 limit, in every JSON form.
package semantics.numbers

import rego.v1

max_u64 := 18446744073709551615

at_max if input.n == max_u64

above_max if input.n > max_u64

below_max if input.n < max_u64

plus_one := input.n + 1

minus_one := input.n - 1

times := input.n * input.n

compared := [input.n == input.m, input.n < input.m, input.n > input.m]

as_set := {input.n, input.m}

as_key := {input.n: "n"}

count_of := count(input.list)

# Equal values spelt differently: the first one made is kept, in topdown's
# order.
spelt contains 1.0 if true

spelt contains 1 if true

spelt_once := 1.0 if true

spelt_once := 1 if input.a

spelt_members := {k: v | some k, v in {"a": 1.0, "b": 1, "c": input.n}}
