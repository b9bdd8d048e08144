package diff

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/arbiter-dev/arbiter/diff/smt"
	"github.com/arbiter-dev/arbiter/engine"
	"github.com/arbiter-dev/arbiter/engine/live"
)

// Child runs each diff in a child process, `arbiter diff --format json`
// of the same binary over the two revisions' files: what the analysis or
// its solvers do (a fault, memory without end, time without end) ends that
// process, and the diff's answers are unknown, never the server.
type Child struct {
	// Path is the arbiter binary (os.Executable()).
	Path string
	// Memory bounds the address space of the child and of each solver it
	// starts (RLIMIT_AS, which they inherit); 0: not bounded here.
	Memory uint64
}

// maxReport bounds what a child may print: a report is kilobytes.
const maxReport = 16 << 20

// Run diffs old against new in a child process. A child that ends without
// a report, or runs past ctx's deadline, answers unknown with why; only a
// cancelled ctx, or no place for the files, is an error.
func (c *Child) Run(ctx context.Context, old, new *engine.Snapshot) (*Report, error) {
	dir, err := os.MkdirTemp("", "arbiter-diff-")
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(dir)
	oldDir, newDir := filepath.Join(dir, "old"), filepath.Join(dir, "new")
	if err := old.WriteFolders(oldDir); err != nil {
		return nil, err
	}
	if err := new.WriteFolders(newDir); err != nil {
		return nil, err
	}
	// The examples start from the fixtures of the new revision, or else the
	// old one's, as an in-process Run does.
	tests := ""
	switch {
	case len(new.Fixtures()) > 0:
		tests = filepath.Join(newDir, "tests")
	case len(old.Fixtures()) > 0:
		tests = filepath.Join(oldDir, "tests")
	}
	cmd := exec.CommandContext(ctx, c.Path, "diff", "--format", "json", "--tests", tests, oldDir, newDir)
	// The child and the solvers it starts are one process group, killed
	// together on timeout or cancellation; and the child ends with this
	// process (its solvers with it: they end with their parent).
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	cmd.Cancel = func() error { return syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) }
	cmd.WaitDelay = time.Second
	stdout, stderr := &smt.LimitedBuffer{Max: maxReport}, &smt.LimitedBuffer{Max: 4096}
	cmd.Stdout, cmd.Stderr = stdout, stderr
	start := time.Now()
	if err := cmd.Start(); err != nil {
		if errors.Is(ctx.Err(), context.Canceled) {
			return nil, ctx.Err()
		}
		return unknownReport(old, new, fmt.Sprintf("the analysis process did not start: %v", err)), nil
	}
	if c.Memory > 0 {
		// Set at once, before the child has loaded anything: it inherits
		// to the solvers the child starts.
		if err := smt.BoundMemory(cmd, c.Memory); err != nil {
			return unknownReport(old, new, fmt.Sprintf("bounding the analysis process's memory: %v", err)), nil
		}
	}
	werr := cmd.Wait()
	switch {
	case errors.Is(ctx.Err(), context.Canceled):
		return nil, ctx.Err()
	case ctx.Err() != nil:
		return unknownReport(old, new, fmt.Sprintf("the analysis did not finish within %s (--diff-timeout)", time.Since(start).Round(time.Second))), nil
	}
	var rep Report
	out, over := stdout.Bytes()
	if jerr := json.Unmarshal(out, &rep); jerr != nil || len(rep.Decisions) == 0 || over {
		why := fmt.Sprintf("the analysis process ended without a report (%v)", werr)
		if c.Memory > 0 {
			why += fmt.Sprintf(", its memory bounded at %d MiB (--diff-memory)", c.Memory>>20)
		}
		if msg := strings.TrimSpace(stderr.String()); msg != "" {
			why += ": " + msg
		}
		return unknownReport(old, new, why), nil
	}
	// The child named the revisions by the folders' content; the caller
	// knows them by theirs.
	rep.Old, rep.New = old.Revision, new.Revision
	for name := range rep.Decisions {
		if rep.Decisions[name] == nil || rep.Decisions[name].missing() {
			rep.Decisions[name] = unknownAll("the analysis process's report lacks an answer")
		}
	}
	return &rep, nil
}

// run diffs old against new in c, or in this process when c is nil, the
// examples made close to new's fixtures (or else old's), as in a child.
func (c *Child) run(ctx context.Context, old, new *engine.Snapshot) (*Report, error) {
	if c != nil {
		return c.Run(ctx, old, new)
	}
	fixtures := new.Fixtures()
	if len(fixtures) == 0 {
		fixtures = old.Fixtures()
	}
	return Run(ctx, old, new, fixtures, Options{})
}

// missing reports whether a question has no answer.
func (d *DecisionDiff) missing() bool {
	for _, q := range Questions {
		if a := d.Get(q); a == nil || (a.Verdict != None && a.Verdict != Found && a.Verdict != Unknown) {
			return true
		}
	}
	return false
}

// unknownReport answers unknown, for why, to every question of every
// decision of either revision.
func unknownReport(old, new *engine.Snapshot, why string) *Report {
	rep := &Report{Old: old.Revision, New: new.Revision, Decisions: map[string]*DecisionDiff{}}
	for _, n := range decisionNames(old, new) {
		rep.Decisions[n] = unknownAll(why)
	}
	return rep
}

// Carried returns the report new's bundle carried (arbiter build
// --diff-against) when it is of old against new and answers every question
// of every decision of both; false otherwise (none, another revision, or
// not a report), and the diff must then be run.
func Carried(old, new *engine.Snapshot) (*Report, bool) {
	raw := new.CarriedDiff()
	if len(raw) == 0 {
		return nil, false
	}
	var rep Report
	if json.Unmarshal(raw, &rep) != nil || rep.Old != old.Revision || rep.New != new.Revision {
		return nil, false
	}
	for _, n := range decisionNames(old, new) {
		if d := rep.Decisions[n]; d == nil || d.missing() {
			return nil, false
		}
	}
	return &rep, true
}

// GateCheck refuses a candidate unless the diff against the live revision
// proves, for every decision, that no input is refuse_to_allow (a found or
// an unknown refuses): arbiter serve --diff-gate. The report its bundle
// carried serves when it is of the live revision; otherwise the diff runs
// now, in child (in this process when nil), within ctx.
func GateCheck(child *Child) live.GateCheck {
	return func(ctx context.Context, cand, live *engine.Snapshot) error {
		if live == nil {
			return nil // the first revision: nothing to be looser than
		}
		rep, ok := Carried(live, cand)
		if !ok {
			var err error
			if rep, err = child.run(ctx, live, cand); err != nil {
				return fmt.Errorf("--diff-gate: the diff against the live revision %s: %w", live.Revision, err)
			}
		}
		var refusals []string
		for _, name := range rep.Names() {
			a := rep.Decisions[name].RefuseToAllow
			switch a.Verdict {
			case Found:
				refusals = append(refusals, fmt.Sprintf("decision %s: refuse_to_allow found: the example %s differs at %s", name, a.Example, fieldList(a.Fields)))
			case Unknown:
				refusals = append(refusals, fmt.Sprintf("decision %s: refuse_to_allow unknown: %s", name, a.Reason))
			}
		}
		if len(refusals) > 0 {
			return fmt.Errorf("--diff-gate: the diff against the live revision %s does not prove that no input is newly allowed: %s", live.Revision, strings.Join(refusals, "; "))
		}
		return nil
	}
}
