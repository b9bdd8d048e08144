package smt

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"
)

// Solver asks one or more SMT solvers (cvc5, z3), each a child process
// spoken to in SMT-LIB 2 over its standard input and output, the same
// commands: each check-sat is answered by the first to say sat or unsat
// (a portfolio: cvc5 finds models with strings quickly, z3 proves many
// unsat formulas quickly), and the others are stopped and started again,
// replaying the commands, for the next check.
type Solver struct {
	ctx      context.Context
	paths    []string
	perCheck time.Duration
	script   *Script
	procs    []*proc  // nil: not running
	segs     []string // the commands sent, per open scope (0: the base)
	last     *proc    // the one whose model Values reads
	broken   error    // a protocol error: every later call fails with it
}

// proc is one solver process.
type proc struct {
	cmd    *exec.Cmd
	in     io.WriteCloser
	out    *bufio.Reader
	name   string
	errMu  sync.Mutex
	stderr strings.Builder
	done   chan struct{}
}

// Result is what check-sat answered.
type Result string

// The answers of check-sat.
const (
	Sat     Result = "sat"
	Unsat   Result = "unsat"
	Unknown Result = "unknown"
)

// Args returns the command line that runs the solver at path in the mode
// this package speaks to it: interactive, with models, with the theory of
// strings, each check-sat bounded by perCheck.
func Args(path string, perCheck time.Duration) ([]string, error) {
	ms := fmt.Sprint(perCheck.Milliseconds())
	switch base := filepath.Base(path); {
	case strings.HasPrefix(base, "cvc5"):
		return []string{"--lang=smt2", "--incremental", "--produce-models", "--strings-exp", "--tlimit-per=" + ms}, nil
	case strings.HasPrefix(base, "z3"):
		return []string{"-in", "-smt2", "-t:" + ms}, nil
	}
	return nil, fmt.Errorf("%s: not a solver this analysis drives (cvc5 or z3)", path)
}

// Start runs the solvers at paths for the terms of b. The processes end
// with ctx, or with Close.
func Start(ctx context.Context, paths []string, perCheck time.Duration, b *Builder) (*Solver, error) {
	if len(paths) == 0 {
		return nil, errors.New("no solver")
	}
	for _, p := range paths {
		if _, err := Args(p, perCheck); err != nil {
			return nil, err
		}
	}
	s := &Solver{ctx: ctx, paths: paths, perCheck: perCheck, script: NewScript(b), procs: make([]*proc, len(paths)), segs: []string{""}}
	s.script.Option("(set-option :produce-models true)")
	s.script.Option("(set-logic ALL)")
	for i := range paths {
		if err := s.start(i); err != nil {
			s.Close()
			return nil, err
		}
	}
	return s, nil
}

func (s *Solver) start(i int) error {
	args, _ := Args(s.paths[i], s.perCheck)
	cmd := exec.CommandContext(s.ctx, s.paths[i], args...)
	cmd.WaitDelay = time.Second
	in, err := cmd.StdinPipe()
	if err != nil {
		return err
	}
	out, err := cmd.StdoutPipe()
	if err != nil {
		return err
	}
	p := &proc{cmd: cmd, in: in, out: bufio.NewReaderSize(out, 1<<16), name: filepath.Base(s.paths[i]), done: make(chan struct{})}
	cmd.Stderr = &lockedWriter{p}
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("starting %s: %w", s.paths[i], err)
	}
	go func() { _ = cmd.Wait(); close(p.done) }()
	s.procs[i] = p
	// Everything said so far, in its scopes.
	for _, seg := range s.segs {
		if _, err := io.WriteString(p.in, seg); err != nil {
			return p.failed(err)
		}
	}
	return nil
}

type lockedWriter struct{ p *proc }

func (w *lockedWriter) Write(b []byte) (int, error) {
	w.p.errMu.Lock()
	defer w.p.errMu.Unlock()
	if w.p.stderr.Len() < 4096 {
		w.p.stderr.Write(b)
	}
	return len(b), nil
}

// Name names the solver that answered the last check (or all of them).
func (s *Solver) Name() string {
	if s.last != nil {
		return s.last.name
	}
	names := make([]string, len(s.paths))
	for i, p := range s.paths {
		names[i] = filepath.Base(p)
	}
	return strings.Join(names, "+")
}

// Script is where commands are written before the next check.
func (s *Solver) Script() *Script { return s.script }

// Push opens a scope, Pop closes it.
func (s *Solver) Push() {
	s.sync()
	s.script.Push()
	s.segs = append(s.segs, "")
	s.sync()
}

// Pop closes the innermost scope.
func (s *Solver) Pop() {
	s.sync()
	s.script.Pop()
	text := s.script.Take()
	if len(s.segs) > 1 {
		s.segs = s.segs[:len(s.segs)-1]
	}
	s.send(text)
}

// sync sends what the script holds to the running solvers and records it.
func (s *Solver) sync() {
	text := s.script.Take()
	s.segs[len(s.segs)-1] += text
	s.send(text)
}

func (s *Solver) send(text string) {
	for i, p := range s.procs {
		if p == nil {
			continue
		}
		if _, err := io.WriteString(p.in, text); err != nil {
			p.kill()
			s.procs[i] = nil
		}
	}
}

// Close ends the solver processes.
func (s *Solver) Close() {
	for i, p := range s.procs {
		if p != nil {
			p.close()
			s.procs[i] = nil
		}
	}
}

func (p *proc) close() {
	_ = p.in.Close()
	select {
	case <-p.done:
	case <-time.After(100 * time.Millisecond):
		p.kill()
	}
}

func (p *proc) kill() {
	_ = p.cmd.Process.Kill()
	<-p.done
}

// failed explains an error talking to a solver: how it ended, and what it
// printed on its error output.
func (p *proc) failed(err error) error {
	select {
	case <-p.done:
		p.errMu.Lock()
		msg := strings.TrimSpace(p.stderr.String())
		p.errMu.Unlock()
		state := p.cmd.ProcessState
		if msg != "" {
			return fmt.Errorf("%s ended (%v): %s", p.name, state, msg)
		}
		return fmt.Errorf("%s ended (%v)", p.name, state)
	default:
	}
	return fmt.Errorf("%s: %w", p.name, err)
}

type answer struct {
	i   int
	res Result
	err error
}

// Check sends what was written and asks check-sat; the first solver to
// answer sat or unsat answers. Any error a solver reports (for any command
// sent) stops that solver: an assertion it did not take must never pass
// for a proof. unknown is the answer when no solver knows.
func (s *Solver) Check() (Result, error) {
	if s.broken != nil {
		return "", s.broken
	}
	for i, p := range s.procs {
		if p == nil {
			if err := s.start(i); err != nil {
				s.procs[i] = nil
			}
		}
	}
	// What was written goes to every solver and into the record a
	// restarted one replays; the check itself is not recorded.
	s.sync()
	s.send("(check-sat)\n")
	answers := make(chan answer, len(s.procs))
	running := 0
	for i, p := range s.procs {
		if p == nil {
			continue
		}
		running++
		go func(i int, p *proc) {
			e, err := ReadSExpr(p.out)
			if err != nil {
				answers <- answer{i: i, err: p.failed(err)}
				return
			}
			switch r := Result(e.Atom); r {
			case Sat, Unsat, Unknown:
				answers <- answer{i: i, res: r}
			default:
				answers <- answer{i: i, err: fmt.Errorf("%s answered check-sat with %.300s", p.name, e)}
			}
		}(i, p)
	}
	var errs []string
	unknown := false
	var win *answer
	for range running {
		a := <-answers
		switch {
		case a.err != nil:
			errs = append(errs, a.err.Error())
			s.procs[a.i].kill()
			s.procs[a.i] = nil
			continue
		case a.res == Unknown:
			unknown = true
			continue
		}
		win = &a
		break
	}
	// The others stop, and start again at the next check.
	for i, p := range s.procs {
		if p != nil && (win == nil || i != win.i) {
			p.kill()
			s.procs[i] = nil
		}
	}
	switch {
	case win != nil:
		s.last = s.procs[win.i]
		return win.res, nil
	case unknown:
		s.last = nil
		return Unknown, nil
	}
	s.broken = errors.New(strings.Join(errs, "; "))
	return "", s.broken
}

// Values asks the values of terms in the model of the last check's
// answer; a term over a variable or function the solver was never told of
// is nil (nothing constrains it).
func (s *Solver) Values(terms []*Term) ([]*SExpr, error) {
	if s.broken != nil {
		return nil, s.broken
	}
	p := s.last
	if p == nil {
		return nil, errors.New("no model")
	}
	var names []string
	var idx []int
	for i, t := range terms {
		if e, ok := s.script.Expr(t); ok {
			names = append(names, e)
			idx = append(idx, i)
		}
	}
	out := make([]*SExpr, len(terms))
	if len(names) == 0 {
		return out, nil
	}
	// get-value changes no assertion: it is not recorded for replay.
	if _, err := io.WriteString(p.in, "(get-value ("+strings.Join(names, " ")+"))\n"); err != nil {
		s.broken = p.failed(err)
		return nil, s.broken
	}
	e, err := ReadSExpr(p.out)
	if err != nil {
		s.broken = p.failed(err)
		return nil, s.broken
	}
	if e.Atom != "" || len(e.List) != len(names) || (len(e.List) > 0 && e.List[0].Atom == "error") {
		s.broken = fmt.Errorf("%s answered get-value with %.300s", p.name, e)
		return nil, s.broken
	}
	for i, pair := range e.List {
		if len(pair.List) != 2 {
			return nil, fmt.Errorf("%s answered get-value with %.200s", p.name, e)
		}
		out[idx[i]] = pair.List[1]
	}
	if Debug != nil {
		Debug(p.name, names, e)
	}
	return out, nil
}

// SExpr is an S-expression a solver printed: an atom (a symbol, a numeral,
// a decimal, or a string literal with its quotes) or a list.
type SExpr struct {
	Atom string
	List []*SExpr
}

func (e *SExpr) String() string {
	if e.List == nil {
		return e.Atom
	}
	parts := make([]string, len(e.List))
	for i, x := range e.List {
		parts[i] = x.String()
	}
	return "(" + strings.Join(parts, " ") + ")"
}

// ReadSExpr reads one S-expression.
func ReadSExpr(r *bufio.Reader) (*SExpr, error) {
	var stack [][]*SExpr
	for {
		c, err := r.ReadByte()
		if err != nil {
			return nil, err
		}
		var atom *SExpr
		switch {
		case c == ' ' || c == '\n' || c == '\t' || c == '\r':
			continue
		case c == ';':
			if _, err := r.ReadString('\n'); err != nil {
				return nil, err
			}
			continue
		case c == '(':
			stack = append(stack, []*SExpr{})
			continue
		case c == ')':
			if len(stack) == 0 {
				return nil, errors.New("unbalanced )")
			}
			list := stack[len(stack)-1]
			stack = stack[:len(stack)-1]
			atom = &SExpr{List: list}
		case c == '"':
			var sb strings.Builder
			sb.WriteByte('"')
			for {
				d, err := r.ReadByte()
				if err != nil {
					return nil, err
				}
				sb.WriteByte(d)
				if d == '"' {
					if n, err := r.Peek(1); err == nil && n[0] == '"' {
						_, _ = r.ReadByte()
						sb.WriteByte('"')
						continue
					}
					break
				}
			}
			atom = &SExpr{Atom: sb.String()}
		case c == '|':
			s, err := r.ReadString('|')
			if err != nil {
				return nil, err
			}
			atom = &SExpr{Atom: "|" + s}
		default:
			var sb strings.Builder
			sb.WriteByte(c)
			for {
				n, err := r.Peek(1)
				if err != nil || strings.IndexByte(" \n\t\r()\";", n[0]) >= 0 {
					break
				}
				d, _ := r.ReadByte()
				sb.WriteByte(d)
			}
			atom = &SExpr{Atom: sb.String()}
		}
		if len(stack) == 0 {
			return atom, nil
		}
		if atom.List == nil && atom.Atom == "" {
			atom.List = []*SExpr{}
		}
		stack[len(stack)-1] = append(stack[len(stack)-1], atom)
	}
}

// DecodeString reads an SMT-LIB 2.6 string literal (with its quotes): ""
// for a quote, \u{X} and \udddd for a code point.
func DecodeString(lit string) (string, error) {
	if len(lit) < 2 || lit[0] != '"' || lit[len(lit)-1] != '"' {
		return "", fmt.Errorf("not a string literal: %.40s", lit)
	}
	s := lit[1 : len(lit)-1]
	var out strings.Builder
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case c == '"' && i+1 < len(s) && s[i+1] == '"':
			out.WriteByte('"')
			i++
		case c == '\\' && i+1 < len(s) && s[i+1] == 'u':
			rest := s[i+2:]
			var hex string
			if strings.HasPrefix(rest, "{") {
				end := strings.IndexByte(rest, '}')
				if end < 0 {
					out.WriteByte(c)
					continue
				}
				hex, i = rest[1:end], i+2+end
			} else if len(rest) >= 4 {
				hex, i = rest[:4], i+5
			} else {
				out.WriteByte(c)
				continue
			}
			r, err := strconv.ParseUint(hex, 16, 32)
			if err != nil {
				return "", fmt.Errorf("bad escape \\u%s", hex)
			}
			if r >= 0xD800 && r <= 0xDFFF {
				r = 0xFFFD // no surrogates in JSON's strings
			}
			out.WriteRune(rune(r))
		default:
			out.WriteByte(c)
		}
	}
	return out.String(), nil
}

// Debug, when set, sees every get-value exchange.
var Debug func(solver string, asked []string, answer *SExpr)
