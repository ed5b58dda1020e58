package corpus

import (
	"bufio"
	"bytes"
	"compress/gzip"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"

	"github.com/clawrl/clawrl/tokenizer"
)

// Public-domain text from Debian packages, used when installed at
// pretraining time (the trained model does not need them):
//
//	fortunes       /usr/share/games/fortunes/*            (apt-get install fortunes)
//	jargon-text    /usr/share/doc/jargon-text/jargon.txt.gz (apt-get install jargon-text)
//	bible-kjv      the King James Bible through `bible`   (apt-get install bible-kjv)
//
// They give the vocabulary ordinary English (so that long system prompts
// do not break into many tokens) and CatText its conversations.

// Texts holds the public-domain text found.
type Texts struct {
	Fortunes []string
	Jargon   [][2]string // term, definition
	Verses   [][2]string // reference, verse
	// Sources describes what was read (path and SHA-256 of the contents),
	// for the training report.
	Sources []string
}

// Empty reports whether no text was found (t may be nil).
func (t *Texts) Empty() bool {
	return t == nil || len(t.Fortunes)+len(t.Jargon)+len(t.Verses) == 0
}

// Default locations of the Debian packages' files.
var (
	FortuneDir = "/usr/share/games/fortunes"
	JargonFile = "/usr/share/doc/jargon-text/jargon.txt.gz"
	BibleCmd   = "bible"
)

// LoadTexts reads whichever of the packages' texts are installed. A
// missing package is skipped; a present but unreadable one is an error.
func LoadTexts() (*Texts, error) {
	t := &Texts{}
	if err := t.loadFortunes(FortuneDir); err != nil {
		return nil, err
	}
	if err := t.loadJargon(JargonFile); err != nil {
		return nil, err
	}
	if err := t.loadBible(); err != nil {
		return nil, err
	}
	return t, nil
}

func digest(b []byte) string {
	h := sha256.Sum256(b)
	return hex.EncodeToString(h[:8])
}

func (t *Texts) loadFortunes(dir string) error {
	entries, err := os.ReadDir(dir)
	if os.IsNotExist(err) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("pretrain: fortunes: %w", err)
	}
	var all []byte
	for _, e := range entries { // sorted by name
		if e.IsDir() || strings.Contains(e.Name(), ".") {
			continue // .dat indexes and .u8 links
		}
		b, err := os.ReadFile(filepath.Join(dir, e.Name()))
		if err != nil {
			return fmt.Errorf("pretrain: fortunes: %w", err)
		}
		all = append(all, b...)
		for _, f := range strings.Split(string(b), "\n%\n") {
			f = strings.TrimSpace(strings.TrimPrefix(f, "%"))
			if len(f) >= 20 && len(f) <= 400 && isPlainText(f) {
				t.Fortunes = append(t.Fortunes, f)
			}
		}
	}
	if len(all) > 0 {
		t.Sources = append(t.Sources, fmt.Sprintf("%s (%d fortunes, sha256 %s)", dir, len(t.Fortunes), digest(all)))
	}
	return nil
}

// isPlainText rejects text with control characters other than newlines
// and tabs (a few fortunes hold backspaces for overstriking).
func isPlainText(s string) bool {
	for _, r := range s {
		if r < 0x20 && r != '\n' && r != '\t' {
			return false
		}
	}
	return true
}

var jargonEntry = regexp.MustCompile(`^   :([^:]{1,40}):\s*(.*)$`)

func (t *Texts) loadJargon(path string) error {
	raw, err := os.ReadFile(path)
	if os.IsNotExist(err) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("pretrain: jargon: %w", err)
	}
	zr, err := gzip.NewReader(bytes.NewReader(raw))
	if err != nil {
		return fmt.Errorf("pretrain: jargon: %w", err)
	}
	text, err := io.ReadAll(zr)
	if err != nil {
		return fmt.Errorf("pretrain: jargon: %w", err)
	}
	lines := strings.Split(string(text), "\n")
	for i := 0; i < len(lines); i++ {
		m := jargonEntry.FindStringSubmatch(lines[i])
		if m == nil {
			continue
		}
		// The definition: the first paragraph after the heading.
		j := i + 1
		for j < len(lines) && strings.TrimSpace(lines[j]) == "" {
			j++
		}
		var para []string
		for ; j < len(lines) && strings.TrimSpace(lines[j]) != ""; j++ {
			para = append(para, strings.TrimSpace(lines[j]))
		}
		def := strings.Join(para, " ")
		def = strings.TrimSpace(strings.TrimPrefix(def, "1. "))
		if len(def) >= 20 && len(def) <= 400 && !jargonEntry.MatchString("   "+def) {
			t.Jargon = append(t.Jargon, [2]string{m[1], def})
		}
	}
	t.Sources = append(t.Sources, fmt.Sprintf("%s (%d entries, sha256 %s)", path, len(t.Jargon), digest(raw)))
	return nil
}

func (t *Texts) loadBible() error {
	path, err := exec.LookPath(BibleCmd)
	if err != nil {
		return nil // not installed
	}
	out, err := exec.Command(path, "-l0", "gen1:1-rev22:21").Output()
	if err != nil {
		return fmt.Errorf("pretrain: %s: %w", path, err)
	}
	sc := bufio.NewScanner(bytes.NewReader(out))
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	chapter := ""
	for sc.Scan() {
		line := sc.Text()
		switch {
		case strings.TrimSpace(line) == "":
		case !strings.HasPrefix(line, " "):
			chapter = strings.TrimSpace(line)
		default:
			num, verse, ok := strings.Cut(strings.TrimSpace(line), " ")
			if ok && chapter != "" && len(verse) <= 300 {
				t.Verses = append(t.Verses, [2]string{chapter + ":" + num, verse})
			}
		}
	}
	if len(t.Verses) > 0 {
		t.Sources = append(t.Sources, fmt.Sprintf("%s gen1:1-rev22:21 (%d verses, sha256 %s)", path, len(t.Verses), digest(out)))
	}
	return nil
}

// Docs returns up to limit bytes of the text as documents, sampled evenly
// from each source, for the vocabulary's training.
func (t *Texts) Docs(limit int) []string {
	if t.Empty() {
		return nil
	}
	var docs []string
	per := limit / 3
	take := func(n int, get func(i int) string) {
		if n == 0 {
			return
		}
		size := 0
		for i := 0; i < n; i++ {
			size += len(get(i))
		}
		step := max(1, size/max(per, 1))
		used := 0
		for i := 0; i < n && used < per; i += step {
			d := get(i)
			docs = append(docs, d)
			used += len(d)
		}
	}
	take(len(t.Fortunes), func(i int) string { return t.Fortunes[i] })
	take(len(t.Jargon), func(i int) string { return t.Jargon[i][0] + ": " + t.Jargon[i][1] })
	take(len(t.Verses), func(i int) string { return t.Verses[i][1] })
	return docs
}

func (g *Generator) genText(r *rand.Rand) Example {
	t := g.text
	type src struct {
		n  int
		fn func(i int) Example
	}
	var srcs []src
	if len(t.Fortunes) > 0 {
		srcs = append(srcs, src{len(t.Fortunes), func(i int) Example {
			q := pick(r, []string{"Tell me a fortune.", "Give me a quote.", "Say something wise.", "Share a fortune cookie.", "Tell me something interesting."})
			return Example{Messages: []tokenizer.Message{user(q), assistant(t.Fortunes[i])}, Key: fmt.Sprintf("fortune:%d", i)}
		}})
	}
	if len(t.Jargon) > 0 {
		srcs = append(srcs, src{len(t.Jargon), func(i int) Example {
			e := t.Jargon[i]
			q := fmt.Sprintf(pick(r, []string{"What does %s mean in hacker jargon?", "Define the jargon term %s.", "In hacker slang, what is %s?"}), e[0])
			return Example{Messages: []tokenizer.Message{user(q), assistant(e[0] + ": " + e[1])}, Key: "jargon:" + e[0]}
		}})
	}
	if len(t.Verses) > 0 {
		srcs = append(srcs, src{len(t.Verses), func(i int) Example {
			v := t.Verses[i]
			q := fmt.Sprintf(pick(r, []string{"Quote %s from the King James Bible.", "What does %s say in the King James Version?", "Recite %s (KJV)."}), v[0])
			return Example{Messages: []tokenizer.Message{user(q), assistant(v[1])}, Key: "verse:" + v[0]}
		}})
	}
	s := pick(r, srcs)
	return s.fn(r.IntN(s.n))
}

// TokenizerDocs is the corpus of the vocabulary's training: n generated
// conversations, rendered, plus the public-domain text and generated JSON.
func TokenizerDocs(g *Generator, render *tokenizer.Tokenizer, r *rand.Rand, n int, texts *Texts, textBytes int) ([]string, error) {
	var docs []string
	for range n {
		ex := g.Next(r)
		s, err := render.ApplyChatTemplate(tokenizer.ChatRequest{Messages: ex.Messages, Tools: ex.Tools})
		if err != nil {
			return nil, err
		}
		docs = append(docs, s)
	}
	// JSON of the shapes agents send: tool definitions, arguments, results.
	for range n / 10 {
		var parts []string
		for _, i := range r.Perm(len(toolDefs))[:3] {
			parts = append(parts, string(toolDefs[i].definition()))
			parts = append(parts, pySpacing(string(toolDefs[i].definition())))
			parts = append(parts, toolDefs[i].scene(r).result)
		}
		docs = append(docs, strings.Join(parts, "\n"))
	}
	docs = append(docs, texts.Docs(textBytes)...)
	return slices.Clip(docs), nil
}
