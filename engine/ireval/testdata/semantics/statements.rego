# Rules that make OPA's planner emit every statement kind of the IR.
package semantics.statements

import rego.v1

# DotStmt, EqualStmt, NotEqualStmt, AssignVarOnceStmt, IsDefinedStmt.
name := input.user.name

active if input.user.active == true

not_active if input.user.active != true

# NotStmt.
inactive if not active

# else chains: BlockStmt, BreakStmt, IsUndefinedStmt, ResetLocalStmt.
tier := "gold" if {
	input.user.points >= 1000
} else := "silver" if {
	input.user.points >= 100
} else := "bronze"

# Default rule.
default allowed := false

allowed if {
	active
	tier != "bronze"
}

# ScanStmt over an array, an object and a set; SetAddStmt; MakeSetStmt.
tags contains tag if some tag in input.user.tags

role_names contains name if some name, _ in input.user.roles

set_members contains x if some x in {"c", "a", "b"}

# ArrayAppendStmt, MakeArrayStmt: array comprehension in set order.
sorted_by_set := [x | some x in {3, 1, 2}]

# Object key order of iteration.
keys_in_order := [k | some k, _ in input.user.roles]

# ObjectInsertOnceStmt: object comprehension and partial object rule.
role_levels := {k: v.level | some k, v in input.user.roles}

levels[k] := v.level if some k, v in input.user.roles

# ObjectInsertStmt, MakeObjectStmt, MakeNullStmt, MakeNumberRefStmt.
summary := {
	"name": name,
	"tier": tier,
	"nothing": null,
	"ratio": 2.5,
	"big": 18446744073709551615,
}

# LenStmt, AssignIntStmt, IsArrayStmt, MakeNumberIntStmt: destructuring.
pair_sum := a + b if [a, b] := input.pair

# IsObjectStmt: object unification.
point_x := x if {"x": x, "y": _} := input.point

# every: IsArrayStmt, IsObjectStmt, IsSetStmt on its domain.
all_positive if every n in input.numbers { n > 0 }

# Functions: CallStmt with arguments, ReturnLocalStmt.
double(x) := 2 * x

doubled := [double(n) | some n in input.numbers]

# WithStmt on input and on data.
tier_for_whale := t if {
	t := tier with input.user.points as 5000
}

limit_from_data := data.semantics.limits.max

limit_overridden := l if {
	l := limit_from_data with data.semantics.limits.max as 7
}

# Reference heads build nested objects (planDotOr: BlockStmt and BreakStmt).
nested.a.b := 1

nested.a.c contains "x"

nested.a.c contains "y" if input.user.active

# Relation builtin (walk) over a composite.
leaves contains [path, v] if {
	walk(input.point, [path, v])
	not is_object(v)
}

# Comparisons of composite input values read them whole.
point_is_known := input.point == {"x": 1, "y": {"z": [1, 2]}}

same_numbers := input.numbers == input.pair
