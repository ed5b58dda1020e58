// Package store is the durable record of everything the daemon learns
// from: turns (prompt and response tokens, the version that generated them
// and its log-probs, the conversation and what came next), explicit
// feedback, scored samples, training steps and the weight versions they
// published. It is an embedded SQLite database (modernc.org/sqlite, no
// cgo) in WAL mode under the data directory, and it is the queue between
// the stages that follow serving: the session tracker writes turns into
// it, the scorer takes turns that are ready out of it and writes samples
// back, the trainer takes queued samples and records each step with the
// samples it trained, in one transaction. Nothing that completed waits in
// memory only, so nothing is dropped because a stage is busy, and a
// restart (clean or kill -9) resumes where the store says.
//
// # Writes
//
// Every write goes through one writer goroutine that gathers whatever is
// waiting into one transaction (group commit): a commit costs one fsync
// (synchronous=FULL) however many turns it carries, so a busy server pays
// for durability once per batch, not once per turn. Callers that need a
// write to be durable before they go on (a turn before the client reads
// the end of its response, feedback before the API answers 200) wait for
// its commit; others only enqueue. The queue is bounded: when it is full,
// enqueuers wait (back-pressure) rather than drop.
//
// # Turn and sample states
//
//	turn:   open ──(next state, expiry)──▶ ready ──(scored)──▶ scored
//	          ▲                                ▲                   │
//	          └── restart restores open turns  └── late feedback ──┘
//	sample: queued ──(applied step)──▶ trained
//	          │  ▲                        │
//	          │  └── step lost in a crash ┘ (not in the resumed checkpoint)
//	          └──▶ dropped (stale, superseded, non-finite step, forgotten)
//
// A turn that is open when the daemon stops (its session had no next
// request yet) stays open and is given back to the session tracker at the
// next start, so a client that continues the conversation after a restart
// still completes it.
//
// # Privacy
//
// Text is redacted before it is written (API keys, bearer tokens, e-mail
// addresses, card numbers, private keys; see Redact) unless turned off. A
// turn whose text held a secret keeps its redacted text for judging and
// export but not its token ids (they would spell the secret), so it is not
// trained on. ForgetSession deletes a session's rows; secure_delete and a
// WAL checkpoint make sure the bytes are overwritten in the files too.
package store

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/rs/zerolog"

	_ "modernc.org/sqlite"

	"github.com/clawrl/clawrl/ratelog" // the database/sql driver "sqlite"
)

// FileName is the database file inside the data directory.
const FileName = "clawrl.db"

// schemaVersion is the layout of the tables below; a database of a newer
// version is refused (an older binary cannot read it), an older one is
// migrated.
const schemaVersion = 4

// migrations[v] brings a database of schema version v to v+1, statement
// by statement, in one transaction.
var migrations = map[int][]string{
	// 1 → 2: a sample may carry its own response (a hinted rollout: the
	// teacher's response to the turn's prompt), trained instead of the
	// turn's.
	1: {"ALTER TABLE samples ADD COLUMN response BLOB"},
	// 2 → 3: a turn records, beside the model's own log-probs, those of
	// the distribution each token was really drawn from (temperature,
	// truncation, grammar mask: the behaviour policy) and which tokens a
	// grammar forced. Turns recorded before have neither: they train with
	// their model log-probs as behaviour and no token masked, as before.
	2: {"ALTER TABLE turns ADD COLUMN sample_logprobs BLOB", "ALTER TABLE turns ADD COLUMN forced BLOB"},
	// 3 → 4: a step records the trainer's numbers for it (KL, entropy,
	// gradient norm, learning rate, ...: Step.Stats). Steps recorded
	// before have none ('{}').
	3: {"ALTER TABLE steps ADD COLUMN stats TEXT NOT NULL DEFAULT '{}'"},
}

// indexes are made at every open if missing: they serve reads only (the
// dashboard's History, Resume's lost steps), so a store of the same schema
// version stays readable by a binary that does not know them.
const indexes = `
CREATE INDEX IF NOT EXISTS samples_step ON samples(step_id);
CREATE INDEX IF NOT EXISTS samples_created ON samples(created);
`

const schema = `
CREATE TABLE IF NOT EXISTS meta (
	key   TEXT PRIMARY KEY,
	value TEXT NOT NULL
);
CREATE TABLE IF NOT EXISTS turns (
	id          TEXT PRIMARY KEY,          -- response id "/" choice
	session_id  TEXT NOT NULL,
	idx         INTEGER NOT NULL,          -- position in the session
	choice      INTEGER NOT NULL,
	response_id TEXT NOT NULL,
	version     INTEGER NOT NULL,          -- the version that generated it
	status      TEXT NOT NULL,             -- open | ready | scored | failed
	gen         INTEGER NOT NULL DEFAULT 0, -- scoring generation (late feedback adds one)
	received    INTEGER NOT NULL,          -- unix milliseconds
	completed   INTEGER,                   -- next state (or another end) arrived
	end_reason  TEXT NOT NULL DEFAULT '',
	redacted    INTEGER NOT NULL DEFAULT 0,
	body        BLOB NOT NULL,             -- JSON: conversation, reply, match keys
	next_state  BLOB,                      -- JSON: the messages that followed
	prompt      BLOB,                      -- int32 LE token ids (NULL: not trainable)
	response    BLOB,
	logprobs    BLOB,                      -- float32 LE: the model's own (temperature 1)
	sample_logprobs BLOB,                  -- float32 LE: under the distribution drawn from (NULL: logprobs)
	forced      BLOB                       -- one byte per response token, 1: a grammar forced it (NULL: none)
);
CREATE INDEX IF NOT EXISTS turns_status ON turns(status, completed);
CREATE INDEX IF NOT EXISTS turns_session ON turns(session_id, idx);
CREATE INDEX IF NOT EXISTS turns_response ON turns(response_id);
CREATE INDEX IF NOT EXISTS turns_received ON turns(received);
CREATE TABLE IF NOT EXISTS feedback (
	id       TEXT PRIMARY KEY,
	turn_id  TEXT NOT NULL,
	thumb    INTEGER NOT NULL,
	text     TEXT NOT NULL,
	received INTEGER NOT NULL
);
CREATE INDEX IF NOT EXISTS feedback_turn ON feedback(turn_id);
CREATE TABLE IF NOT EXISTS samples (
	id       TEXT PRIMARY KEY,             -- turn id "#" gen
	turn_id  TEXT NOT NULL,
	gen      INTEGER NOT NULL,
	created  INTEGER NOT NULL,
	version  INTEGER NOT NULL,
	kind     TEXT NOT NULL,
	reward   INTEGER NOT NULL,
	source   TEXT NOT NULL,
	votes    TEXT NOT NULL,                -- JSON array
	hint     TEXT NOT NULL,
	teacher  BLOB,                         -- float32 LE teacher log-probs
	status   TEXT NOT NULL,                -- queued | trained | dropped | nosignal
	reason   TEXT NOT NULL DEFAULT '',
	step_id  INTEGER,
	response BLOB                          -- int32 LE: the sample's own response (NULL: the turn's)
);
CREATE INDEX IF NOT EXISTS samples_status ON samples(status, version);
CREATE INDEX IF NOT EXISTS samples_turn ON samples(turn_id);
CREATE TABLE IF NOT EXISTS steps (
	id       INTEGER PRIMARY KEY AUTOINCREMENT,
	step     INTEGER NOT NULL,             -- the trainer's step count after it
	version  INTEGER NOT NULL,             -- the version it published
	created  INTEGER NOT NULL,
	samples  TEXT NOT NULL,                -- JSON array of sample ids
	loss     REAL NOT NULL,
	status   TEXT NOT NULL,                -- applied | lost | rolled_back
	stats    TEXT NOT NULL DEFAULT '{}'    -- JSON object: the trainer's numbers for the step (Step.Stats)
);
CREATE TABLE IF NOT EXISTS versions (
	number  INTEGER PRIMARY KEY,
	parent  INTEGER NOT NULL,
	step    INTEGER NOT NULL,
	created INTEGER NOT NULL,
	note    TEXT NOT NULL
);
`

// Options configure a store. Zero values take the defaults.
type Options struct {
	// BaseModel identifies the base checkpoint the lineage trains from; a
	// data directory that holds another base model's lineage is refused.
	// Empty skips the check.
	BaseModel string
	// NoRedact stores text as it came (Redact is on by default).
	NoRedact bool
	// MaxBytes is the disk budget of the database files; when they reach
	// it, new turns are refused (counted, logged) and serving goes on.
	// 0 means no budget.
	MaxBytes int64
	// QueueLimit bounds the writes waiting for the writer (default 4096);
	// beyond it enqueuers wait.
	QueueLimit int
	// Registry receives the store's metrics (nil: none).
	Registry prometheus.Registerer
	Log      zerolog.Logger
	// Now replaces time.Now (tests).
	Now func() time.Time

	// maxPages caps the database's pages (tests: a full disk).
	maxPages int
}

// DB is an open store. Its methods are safe for concurrent use.
type DB struct {
	path string
	db   *sql.DB
	opts Options
	met  metrics
	warn *ratelog.Limiter

	mu      sync.Mutex
	cond    *sync.Cond
	queue   []*op
	closing bool
	done    chan struct{}
	seq     uint64 // ops enqueued
	doneSeq uint64 // ops committed (or failed)

	ready chan struct{} // pinged when turns become ready or samples queued

	fbMu    sync.Mutex
	fbReady []string // turns feedback made ready since the last FeedbackReady (in memory only)

	size     atomic.Int64 // bytes of the database files, refreshed by the writer
	sizeAt   time.Time
	closeErr error
	once     sync.Once
}

// op is one enqueued write. fn runs inside the batch's transaction, under
// a savepoint of its own, so that one failing op does not undo the others.
type op struct {
	fn    func(tx *sql.Tx) error
	seq   uint64
	err   error
	done  chan struct{} // closed when committed or failed; nil for fire-and-forget
	kind  string
	ping  bool   // signal Ready after commit
	after func() // run by the writer after a successful commit, before the ping (nil: none)
}

// ErrCorrupt wraps the error of a database that SQLite cannot read.
var ErrCorrupt = errors.New("store: database is damaged")

// Open opens (creating if needed) the store in dir, which is created with
// mode 0700 when missing. It refuses a directory it cannot write, a
// damaged database (naming the file and what to do), a database of
// another schema version, and one that holds another base model's
// lineage.
func Open(dir string, opts Options) (*DB, error) {
	if opts.QueueLimit <= 0 {
		opts.QueueLimit = 4096
	}
	if opts.Now == nil {
		opts.Now = time.Now
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, fmt.Errorf("store: data directory %s: %w", dir, err)
	}
	probe, err := os.CreateTemp(dir, ".write-test-")
	if err != nil {
		return nil, fmt.Errorf("store: data directory %s is not writable: %w (set data.dir to a writable directory)", dir, err)
	}
	probe.Close()
	os.Remove(probe.Name())

	path := filepath.Join(dir, FileName)
	if err := checkFile(path); err != nil {
		return nil, err
	}
	dsn := "file:" + path + "?_pragma=journal_mode(WAL)&_pragma=synchronous(FULL)&_pragma=busy_timeout(10000)" +
		"&_pragma=secure_delete(ON)&_pragma=foreign_keys(ON)&_txlock=immediate"
	if opts.maxPages > 0 {
		dsn += fmt.Sprintf("&_pragma=max_page_count(%d)", opts.maxPages)
	}
	db, err := sql.Open("sqlite", dsn)
	if err != nil {
		return nil, fmt.Errorf("store: %s: %w", path, err)
	}
	d := &DB{path: path, db: db, opts: opts, done: make(chan struct{}), ready: make(chan struct{}, 1)}
	d.cond = sync.NewCond(&d.mu)
	d.warn = ratelog.New(opts.Log, 10*time.Second)
	fail := func(err error) (*DB, error) {
		db.Close()
		return nil, err
	}
	if err := d.check(); err != nil {
		return fail(err)
	}
	if err := d.migrate(); err != nil {
		return fail(err)
	}
	if _, err := d.db.Exec(indexes); err != nil {
		return fail(fmt.Errorf("store: %s: creating indexes: %w", d.path, err))
	}
	if _, err := d.db.Exec(responsesSchema); err != nil {
		return fail(fmt.Errorf("store: %s: creating the responses tables: %w", d.path, err))
	}
	if err := d.checkBase(); err != nil {
		return fail(err)
	}
	if err := d.loadFeedbackReady(); err != nil {
		return fail(err)
	}
	met, err := newMetrics(d, opts.Registry)
	if err != nil {
		return fail(err)
	}
	d.met = met
	d.refreshSize()
	go d.writer()
	return d, nil
}

// checkFile refuses a database file that exists but cannot be the store:
// an empty one (SQLite would silently make a new store in its place and
// the history would be gone without a word; a truncated copy or a full
// disk leaves one), or one this process cannot write.
func checkFile(path string) error {
	st, err := os.Stat(path)
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("store: %s: %w", path, err)
	}
	if st.Size() == 0 {
		if wal, err := os.Stat(path + "-wal"); err != nil || wal.Size() == 0 {
			return fmt.Errorf("store: %s is empty (0 bytes): it was truncated (a full disk or an interrupted copy can do that), "+
				"and a new store in its place would drop the history without a word; restore it from a backup, or delete it to start a new store", path)
		}
	}
	f, err := os.OpenFile(path, os.O_RDWR, 0)
	if err != nil {
		return fmt.Errorf("store: %s cannot be opened for writing (%w): the daemon records every turn there; "+
			"make it writable (chmod u+w %s, and its directory), or set data.dir to another directory", path, err, path)
	}
	return f.Close()
}

// corrupt turns an SQLite error on opening into an error that names the
// file and what to do about it.
func (d *DB) corrupt(err error) error {
	return fmt.Errorf("%w: %s: %v; move it aside (the daemon then starts a new one), or try "+
		"`sqlite3 %s .recover | sqlite3 recovered.db` and put recovered.db in its place",
		ErrCorrupt, d.path, err, d.path)
}

// check runs SQLite's quick integrity check, so a damaged file is refused
// at start rather than failing later writes.
func (d *DB) check() error {
	var res string
	if err := d.db.QueryRow("PRAGMA quick_check").Scan(&res); err != nil {
		return d.corrupt(err)
	}
	if res != "ok" {
		return d.corrupt(errors.New(res))
	}
	var mode string
	if err := d.db.QueryRow("PRAGMA journal_mode").Scan(&mode); err != nil {
		return d.corrupt(err)
	}
	if !strings.EqualFold(mode, "wal") {
		return fmt.Errorf("store: %s: journal mode %q, want wal (is the file on a file system without shared memory?)", d.path, mode)
	}
	return nil
}

func (d *DB) migrate() error {
	var v int
	if err := d.db.QueryRow("PRAGMA user_version").Scan(&v); err != nil {
		return d.corrupt(err)
	}
	switch v {
	case 0:
		if _, err := d.db.Exec(schema); err != nil {
			return fmt.Errorf("store: %s: creating tables: %w", d.path, err)
		}
		if _, err := d.db.Exec(fmt.Sprintf("PRAGMA user_version = %d", schemaVersion)); err != nil {
			return fmt.Errorf("store: %s: %w", d.path, err)
		}
	case schemaVersion:
	default:
		if v > schemaVersion {
			return fmt.Errorf("store: %s: schema version %d, this binary reads %d (a newer clawrl wrote it)", d.path, v, schemaVersion)
		}
		for ; v < schemaVersion; v++ {
			step, ok := migrations[v]
			if !ok {
				return fmt.Errorf("store: %s: schema version %d cannot be migrated to %d", d.path, v, schemaVersion)
			}
			if err := d.migrateStep(step, v+1); err != nil {
				return fmt.Errorf("store: %s: migrating schema %d to %d: %w", d.path, v, v+1, err)
			}
		}
	}
	return nil
}

// migrateStep runs one migration and records the new schema version, in
// one transaction: a crash leaves the database at either version.
func (d *DB) migrateStep(step []string, to int) error {
	tx, err := d.db.Begin()
	if err != nil {
		return err
	}
	defer tx.Rollback()
	for _, st := range step {
		if _, err := tx.Exec(st); err != nil {
			return err
		}
	}
	if _, err := tx.Exec(fmt.Sprintf("PRAGMA user_version = %d", to)); err != nil {
		return err
	}
	return tx.Commit()
}

// checkBase records the base model in a new store and refuses a store of
// another base.
func (d *DB) checkBase() error {
	if d.opts.BaseModel == "" {
		return nil
	}
	var have string
	err := d.db.QueryRow("SELECT value FROM meta WHERE key = 'base_model'").Scan(&have)
	switch {
	case errors.Is(err, sql.ErrNoRows):
		_, err = d.db.Exec("INSERT INTO meta(key, value) VALUES ('base_model', ?)", d.opts.BaseModel)
		if err != nil {
			return fmt.Errorf("store: %s: %w", d.path, err)
		}
		return nil
	case err != nil:
		return fmt.Errorf("store: %s: %w", d.path, err)
	case have != d.opts.BaseModel:
		return fmt.Errorf("store: %s holds the training lineage of base model %s, and this daemon serves base model %s: "+
			"use another data.dir for this model (or move %s aside to start over)", d.path, have, d.opts.BaseModel, filepath.Dir(d.path))
	}
	return nil
}

// Path is the database file.
func (d *DB) Path() string { return d.path }

// Dir is the data directory.
func (d *DB) Dir() string { return filepath.Dir(d.path) }

// SQL is the underlying database, for read-only queries in tests and
// tools.
func (d *DB) SQL() *sql.DB { return d.db }

// Ready is pinged (without blocking; it holds one signal) after a commit
// that made turns ready to score or queued samples to train.
func (d *DB) Ready() <-chan struct{} { return d.ready }

// Close drains the queue, stops the writer, checkpoints the WAL into the
// database file and closes it. Writes enqueued afterwards fail.
func (d *DB) Close() error {
	d.once.Do(func() {
		d.mu.Lock()
		d.closing = true
		d.cond.Broadcast()
		d.mu.Unlock()
		<-d.done
		if _, err := d.db.Exec("PRAGMA wal_checkpoint(TRUNCATE)"); err != nil {
			d.closeErr = fmt.Errorf("store: %s: checkpoint: %w", d.path, err)
		}
		if err := d.db.Close(); err != nil && d.closeErr == nil {
			d.closeErr = fmt.Errorf("store: %s: %w", d.path, err)
		}
	})
	return d.closeErr
}

// ErrClosed is returned for writes after Close.
var ErrClosed = errors.New("store: closed")

// enqueue adds a write; it waits while the queue is full. With wait, it
// returns once the write is committed, with its error.
func (d *DB) enqueue(kind string, wait, ping bool, fn func(tx *sql.Tx) error) error {
	return d.enqueueAfter(kind, wait, ping, fn, nil)
}

// enqueueAfter is enqueue with a function the writer runs once the write
// is committed (not when it failed).
func (d *DB) enqueueAfter(kind string, wait, ping bool, fn func(tx *sql.Tx) error, after func()) error {
	o := &op{fn: fn, kind: kind, ping: ping, after: after}
	if wait {
		o.done = make(chan struct{})
	}
	d.mu.Lock()
	for len(d.queue) >= d.opts.QueueLimit && !d.closing {
		d.cond.Wait()
	}
	if d.closing {
		d.mu.Unlock()
		return ErrClosed
	}
	d.seq++
	o.seq = d.seq
	d.queue = append(d.queue, o)
	d.cond.Broadcast()
	d.mu.Unlock()
	if !wait {
		return nil
	}
	<-o.done
	return o.err
}

// Flush waits until every write enqueued before it is committed.
func (d *DB) Flush() error {
	d.mu.Lock()
	defer d.mu.Unlock()
	target := d.seq
	for d.doneSeq < target {
		d.cond.Wait()
	}
	return nil
}

// maxBatch bounds the writes of one transaction.
const maxBatch = 1024

// writer commits queued writes in batches until Close.
func (d *DB) writer() {
	defer close(d.done)
	for {
		d.mu.Lock()
		for len(d.queue) == 0 && !d.closing {
			d.cond.Wait()
		}
		if len(d.queue) == 0 && d.closing {
			d.mu.Unlock()
			return
		}
		n := min(len(d.queue), maxBatch)
		batch := append([]*op(nil), d.queue[:n]...)
		d.queue = append(d.queue[:0], d.queue[n:]...)
		d.cond.Broadcast() // room in the queue
		d.mu.Unlock()

		d.commit(batch)

		// What runs after a commit runs before anyone waiting for the
		// commit (Flush, a waiting enqueue) goes on: a Flush that returned
		// before FeedbackReady had the ids it committed lost them to the
		// next call.
		for _, o := range batch {
			if o.after != nil && o.err == nil {
				o.after()
			}
		}
		d.mu.Lock()
		d.doneSeq = batch[len(batch)-1].seq
		d.cond.Broadcast()
		d.mu.Unlock()
		ping := false
		for _, o := range batch {
			ping = ping || (o.ping && o.err == nil)
			if o.done != nil {
				close(o.done)
			}
		}
		if ping {
			select {
			case d.ready <- struct{}{}:
			default:
			}
		}
	}
}

// commit runs one batch in one transaction, each op under a savepoint.
func (d *DB) commit(batch []*op) {
	start := d.opts.Now()
	failAll := func(err error) {
		for _, o := range batch {
			if o.err == nil {
				o.err = err
			}
		}
		d.met.writeErrors.Add(float64(len(batch)))
		d.warn.Warn("store_write", err, "store: writes failed (training data not stored; serving goes on)")
	}
	tx, err := d.db.BeginTx(context.Background(), nil)
	if err != nil {
		failAll(fmt.Errorf("store: %s: begin: %w", d.path, err))
		return
	}
	for _, o := range batch {
		if _, err := tx.Exec("SAVEPOINT op"); err != nil {
			o.err = err
			continue
		}
		if err := o.fn(tx); err != nil {
			o.err = err
			tx.Exec("ROLLBACK TO op")
			d.met.writeErrors.Inc()
			d.warn.Warn("store_op_"+o.kind, err, "store: a write failed")
		}
		tx.Exec("RELEASE op")
	}
	if err := tx.Commit(); err != nil {
		tx.Rollback()
		failAll(fmt.Errorf("store: %s: commit: %w", d.path, err))
		return
	}
	d.met.commits.Inc()
	d.met.batch.Observe(float64(len(batch)))
	d.met.commitSeconds.Observe(d.opts.Now().Sub(start).Seconds())
	if d.opts.Now().Sub(d.sizeAt) > 2*time.Second {
		d.refreshSize()
	}
}

// refreshSize stats the database files for the disk budget.
func (d *DB) refreshSize() {
	var total int64
	for _, suffix := range []string{"", "-wal", "-shm"} {
		if st, err := os.Stat(d.path + suffix); err == nil {
			total += st.Size()
		}
	}
	d.size.Store(total)
	d.sizeAt = d.opts.Now()
}

// Bytes is the size of the database files, as last measured.
func (d *DB) Bytes() int64 { return d.size.Load() }

// overBudget reports whether the disk budget is spent.
func (d *DB) overBudget() bool {
	return d.opts.MaxBytes > 0 && d.size.Load() >= d.opts.MaxBytes
}

func (d *DB) now() int64 { return d.opts.Now().UnixMilli() }
