package smt

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// Solver asks one or more SMT solvers (cvc5, z3), each a child process
// spoken to in SMT-LIB 2 over its standard input and output, the same
// commands: each check-sat is answered by the first to say sat or unsat
// (a portfolio: whichever is faster on a question answers it), and the others are stopped and started again,
// replaying the commands, for the next check.
type Solver struct {
	ctx      context.Context
	paths    []string
	perCheck time.Duration
	memory   uint64 // each process's address space, in bytes (0: unbounded)
	script   *Script
	procs    []*proc   // nil: not running
	segs     []string  // the commands sent, per open scope (0: the base)
	last     *proc     // the one whose model Values reads
	broken   error     // a protocol error: every later call fails with it
	deadline time.Time // SetDeadline's (zero: none)
}

// ErrBudget is a check's error when the solver's deadline has passed
// before it: it was not asked.
var ErrBudget = errors.New("not asked: the time budget was spent on the questions before it")

// SetDeadline bounds every later check by t as well: one that would start
// after it is not asked (ErrBudget), one that runs into it is unknown.
func (s *Solver) SetDeadline(t time.Time) { s.deadline = t }

// OutOfTime reports whether the deadline has passed.
func (s *Solver) OutOfTime() bool { return !s.deadline.IsZero() && !time.Now().Before(s.deadline) }

// proc is one solver process. Neither side of its pipes ever blocks the
// analysis: what is sent to it is queued and written by a goroutine of its
// own (a solver can take long over a command that is not check-sat, as
// cvc5 preprocessing at a push), and what it prints is read as it comes,
// one S-expression at a time, into out (a solver printing an error for a
// command while it is being written to never fills its pipe).
type proc struct {
	cmd     *exec.Cmd
	out     chan *SExpr // closed when the output ends; then readErr says why
	name    string
	stderr  LimitedBuffer
	errMu   sync.Mutex
	readErr error
	done    chan struct{}

	inMu    sync.Mutex
	inCond  *sync.Cond
	pending []string
	closing bool
}

// write queues text for the solver's standard input.
func (p *proc) write(text string) {
	p.inMu.Lock()
	p.pending = append(p.pending, text)
	p.inMu.Unlock()
	p.inCond.Signal()
}

// writeAll writes what is queued, in order, until the input is closed.
func (p *proc) writeAll(in io.WriteCloser) {
	defer in.Close()
	for {
		p.inMu.Lock()
		for len(p.pending) == 0 && !p.closing {
			p.inCond.Wait()
		}
		batch, closing := p.pending, p.closing
		p.pending = nil
		p.inMu.Unlock()
		for _, text := range batch {
			if _, err := io.WriteString(in, text); err != nil {
				return // the process ended: its output says so
			}
		}
		if closing && len(batch) == 0 {
			return
		}
	}
}

// closeInput ends the input once what is queued is written.
func (p *proc) closeInput() {
	p.inMu.Lock()
	p.closing = true
	p.inMu.Unlock()
	p.inCond.Signal()
}

// outBacklog is how many unread answers a solver may print before it is
// stopped: this side reads one answer per check-sat or get-value, so more
// are errors it printed for commands.
const outBacklog = 64

// read delivers what the solver prints to p.out.
func (p *proc) read(r io.Reader) {
	br := bufio.NewReaderSize(r, 1<<16)
	defer close(p.out)
	for {
		e, err := ReadSExpr(br)
		if err != nil {
			p.errMu.Lock()
			p.readErr = err
			p.errMu.Unlock()
			return
		}
		select {
		case p.out <- e:
		default:
			p.errMu.Lock()
			p.readErr = fmt.Errorf("more than %d answers not asked for, the last %.300s", outBacklog, e)
			p.errMu.Unlock()
			_ = p.cmd.Process.Kill()
			return
		}
	}
}

// within returns the next S-expression the solver prints within d.
func (p *proc) within(d time.Duration) (*SExpr, error) {
	timer := time.NewTimer(d)
	defer timer.Stop()
	select {
	case <-timer.C:
		p.kill()
		return nil, fmt.Errorf("%s did not answer within %v", p.name, d)
	case e, ok := <-p.out:
		if ok {
			return e, nil
		}
	}
	return p.next()
}

// next returns the next S-expression the solver printed.
func (p *proc) next() (*SExpr, error) {
	e, ok := <-p.out
	if ok {
		return e, nil
	}
	p.errMu.Lock()
	err := p.readErr
	p.errMu.Unlock()
	return nil, p.failed(err)
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

// Start runs the solvers at paths for the terms of b, each process's
// address space bounded by memory bytes (0: not bounded here): a solver
// out of memory ends, and its check is unknown. The processes end with
// ctx, or with Close.
func Start(ctx context.Context, paths []string, perCheck time.Duration, memory uint64, b *Builder) (*Solver, error) {
	if len(paths) == 0 {
		return nil, errors.New("no solver")
	}
	for _, p := range paths {
		if _, err := Args(p, perCheck); err != nil {
			return nil, err
		}
	}
	s := &Solver{ctx: ctx, paths: paths, perCheck: perCheck, memory: memory, script: NewScript(b), procs: make([]*proc, len(paths)), segs: []string{""}}
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
	// A solver ends with the process that asks it, however that ends (a
	// killed `arbiter diff` must not leave cvc5 running on its last
	// question for ever).
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	cmd.WaitDelay = time.Second
	in, err := cmd.StdinPipe()
	if err != nil {
		return err
	}
	out, err := cmd.StdoutPipe()
	if err != nil {
		return err
	}
	p := &proc{cmd: cmd, out: make(chan *SExpr, outBacklog), name: filepath.Base(s.paths[i]), done: make(chan struct{}), stderr: LimitedBuffer{Max: 4096}}
	p.inCond = sync.NewCond(&p.inMu)
	cmd.Stderr = &p.stderr
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("starting %s: %w", s.paths[i], err)
	}
	if s.memory > 0 {
		// Before it is sent anything: until then it holds only itself. A
		// process may only lower its children's bound below its own (which
		// they inherit): the smaller one holds.
		m := s.memory
		var own unix.Rlimit
		if unix.Getrlimit(unix.RLIMIT_AS, &own) == nil && own.Max < m {
			m = own.Max
		}
		if err := BoundMemory(cmd, m); err != nil {
			return fmt.Errorf("bounding the memory of %s: %w", s.paths[i], err)
		}
	}
	reading := make(chan struct{})
	go func() { defer close(reading); p.read(out) }()
	// Wait reads no more of the output once the process ends: the reader
	// does, and Wait closes the pipe only after it.
	go func() { <-reading; _ = cmd.Wait(); close(p.done) }()
	go p.writeAll(in)
	s.procs[i] = p
	// Everything said so far, in its scopes.
	for _, seg := range s.segs {
		p.write(seg)
	}
	return nil
}

// BoundMemory bounds the address space of cmd's process, started, to
// limit bytes (RLIMIT_AS, which its children inherit); when it cannot, the
// process is killed.
func BoundMemory(cmd *exec.Cmd, limit uint64) error {
	lim := unix.Rlimit{Cur: limit, Max: limit}
	if err := unix.Prlimit(cmd.Process.Pid, unix.RLIMIT_AS, &lim, nil); err != nil {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
		return err
	}
	return nil
}

// LimitedBuffer keeps the first Max bytes written to it, and whether more
// came; it may be written and read at once (a process's output).
type LimitedBuffer struct {
	Max  int
	mu   sync.Mutex
	buf  bytes.Buffer
	over bool
}

func (b *LimitedBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	room := b.Max - b.buf.Len()
	b.over = b.over || len(p) > room
	b.buf.Write(p[:max(0, min(len(p), room))])
	return len(p), nil
}

// Bytes are the bytes kept, and Over whether more were written.
func (b *LimitedBuffer) Bytes() ([]byte, bool) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Bytes(), b.over
}

// String is the text kept.
func (b *LimitedBuffer) String() string {
	kept, _ := b.Bytes()
	return string(kept)
}

// Name names the solver that answered the last check (or all of them).
func (s *Solver) Name() string {
	if s.last != nil {
		return s.last.name
	}
	return strings.Join(mapped(s.paths, filepath.Base), "+")
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
	if Tee != nil {
		_, _ = io.WriteString(Tee, text)
	}
	for _, p := range s.procs {
		if p != nil {
			p.write(text)
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
	p.closeInput()
	select {
	case <-p.done:
	case <-time.After(100 * time.Millisecond):
		p.kill()
	}
}

func (p *proc) kill() {
	_ = p.cmd.Process.Kill()
	p.closeInput()
	<-p.done
}

// failed explains an error talking to a solver: how it ended, and what it
// printed on its error output.
func (p *proc) failed(err error) error {
	select {
	case <-p.done:
		msg := strings.TrimSpace(p.stderr.String())
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
func (s *Solver) Check() (Result, error) { return s.CheckWithin(s.perCheck) }

// CheckWithin is Check with a shorter time: the solvers still running
// when it is over are stopped, and started again at the next check.
func (s *Solver) CheckWithin(limit time.Duration) (Result, error) {
	limit = min(limit, s.perCheck)
	if s.broken != nil {
		return "", s.broken
	}
	if !s.deadline.IsZero() {
		left := time.Until(s.deadline)
		if left <= 0 {
			return "", ErrBudget
		}
		limit = min(limit, left)
	}
	for i, p := range s.procs {
		if p == nil {
			_ = s.start(i) // one that does not start is not asked
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
			e, err := p.next()
			if err != nil {
				answers <- answer{i: i, err: err}
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
	// A solver's own limit is not always kept (cvc5 can run past
	// --tlimit-per): the clock here is the one that counts.
	grace := 2 * time.Second
	if limit < s.perCheck {
		grace = 0
	}
	timer := time.NewTimer(limit + grace)
	defer timer.Stop()
	for range running {
		var a answer
		select {
		case a = <-answers:
		case <-timer.C:
			unknown = true
		case <-s.ctx.Done():
			unknown = true
		}
		if unknown && a.res == "" && a.err == nil {
			break // out of time: what has not answered is stopped below
		}
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
// is nil (nothing constrains it), and so is one too large to write
// (Script.Expr).
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
	p.write("(get-value (" + strings.Join(names, " ") + "))\n")
	// A solver that does not answer it, or not as asked, is stopped (and
	// started again at the next check): the example is lost, not a proof.
	stop := func(err error) ([]*SExpr, error) {
		p.kill()
		if i := slices.Index(s.procs, p); i >= 0 {
			s.procs[i] = nil
		}
		s.last = nil
		return nil, err
	}
	e, err := p.within(s.perCheck)
	if err != nil {
		return stop(err)
	}
	if e.Atom != "" || len(e.List) != len(names) || (len(e.List) > 0 && e.List[0].Atom == "error") {
		return stop(fmt.Errorf("%s answered get-value with %.300s", p.name, e))
	}
	for i, pair := range e.List {
		if len(pair.List) != 2 {
			return stop(fmt.Errorf("%s answered get-value with %.200s", p.name, e))
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
	return "(" + strings.Join(mapped(e.List, (*SExpr).String), " ") + ")"
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

// Tee, when set, receives every command sent (to the running solvers;
// a restarted one is sent the record again, not shown here).
var Tee io.Writer

// Debug, when set, sees every get-value exchange.
var Debug func(solver string, asked []string, answer *SExpr)
