package engine

import "time"

// Config names the folders a Snapshot is built from. It is a plain struct:
// flags and environment variables are read in cmd, never here.
type Config struct {
	Policies string // Rego modules and their data.json files
	Schemas  string // <decision>/input.json and <decision>/result.json
	// Tests, when set, holds *_test.rego files and fixtures/<decision>/*.json.
	// A candidate Snapshot only becomes active when all of them pass.
	Tests string
	// EvalTimeout bounds one evaluation; zero means DefaultEvalTimeout.
	EvalTimeout time.Duration
	// MaxInputValues caps the JSON values of one input (body_too_large
	// beyond it); zero means input.DefaultMaxValues.
	MaxInputValues int
	// TestTimeout bounds each Rego test and fixture of the reload gate; zero
	// means DefaultTestTimeout. It is not EvalTimeout: a gate that shared
	// the request deadline would refuse a good candidate on a busy machine.
	TestTimeout time.Duration
	// ReloadTimeout bounds a whole reload, reading, compiling and testing
	// included; zero means DefaultReloadTimeout. engine/live's gate holds
	// it; Load and LoadFiles do not read it.
	ReloadTimeout time.Duration
	// MaxFileBytes caps each file read; zero means DefaultMaxFileBytes.
	MaxFileBytes int64
	// SelfCheck, when set, is handed every answer of a compiled program, on
	// the request path (it must not block): package shadow decides a sample
	// of them again with topdown in the background (engine/compiled.go).
	SelfCheck func(Recheck)
}

// Defaults of Config.
const (
	DefaultEvalTimeout   = 2 * time.Second
	DefaultTestTimeout   = 10 * time.Second
	DefaultReloadTimeout = time.Minute
)

// DefaultMaxFileBytes caps one policy, data, schema or test file when
// Config leaves MaxFileBytes zero: far above any hand-written file, and low
// enough that a file swapped for something huge cannot take the process down.
const DefaultMaxFileBytes = 32 << 20
