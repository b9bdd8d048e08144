package main

import (
	"io"
	"slices"
	"strings"
	"testing"

	"github.com/arbiter-dev/arbiter/decisionlog"
)

// TestFlagsAmongOperands: a command's flags may stand before, between or
// after its operands (arbiter diff OLD NEW --format json, arbiter replay
// var/ --format json), and "--" makes what follows operands only.
func TestFlagsAmongOperands(t *testing.T) {
	for _, tc := range []struct {
		args     []string
		format   string
		operands []string
	}{
		{[]string{"--format", "json", "old", "new"}, "json", []string{"old", "new"}},
		{[]string{"old", "new", "--format", "json"}, "json", []string{"old", "new"}},
		{[]string{"old", "--format=json", "new"}, "json", []string{"old", "new"}},
		{[]string{"old", "-", "new"}, "text", []string{"old", "-", "new"}},
		{[]string{"old", "--", "--format", "json"}, "text", []string{"old", "--format", "json"}},
		{[]string{"--", "--format"}, "text", []string{"--format"}},
		{nil, "text", nil},
	} {
		c := newCommand("x", "")
		format := c.String("format", "text", "")
		if done, code := c.parse(tc.args, io.Discard, io.Discard, exitInput); done {
			t.Fatalf("%q: done with exit %d", tc.args, code)
		}
		if *format != tc.format || !slices.Equal(c.Args(), tc.operands) || c.NArg() != len(tc.operands) {
			t.Errorf("%q: --format %q, operands %q; want %q, %q", tc.args, *format, c.Args(), tc.format, tc.operands)
		}
	}
	c := newCommand("x", "")
	if done, code := c.parse([]string{"old", "--nope"}, io.Discard, io.Discard, exitInput); !done || code != exitInput {
		t.Errorf("an unknown flag after an operand: done %v, exit %d; want refused", done, code)
	}
}

// TestReplicaIDIsBounded: a replica's id is a stored name (the decision
// store indexes it), so serve refuses one past decisionlog.MaxNameBytes.
func TestReplicaIDIsBounded(t *testing.T) {
	long := &fleetConfig{replicaID: strings.Repeat("r", decisionlog.MaxNameBytes+1)}
	if err := long.validate(); err == nil || !strings.Contains(err.Error(), "--replica-id") {
		t.Errorf("a %d-byte --replica-id: %v; want it refused", len(long.replicaID), err)
	}
	if err := (&fleetConfig{replicaID: "replica-1"}).validate(); err != nil {
		t.Errorf("--replica-id replica-1: %v", err)
	}
}
