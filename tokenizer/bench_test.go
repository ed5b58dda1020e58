package tokenizer

import (
	"math/rand/v2"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

// commonWords are frequent English words; proseText mixes them with made-up
// words so that the text has a long tail of word types, as real prose does,
// and the word cache cannot hold every word.
var commonWords = strings.Fields(`the of and to a in is it you that he was for on are with as I his
they be at one have this from or had by hot word but what some we can out other were all there when
up use your how said an each she which do their time if will way about many then them write would
like so these her long make thing see him two has look more day could go come did number sound no
most people my over know water than call first who may down side been now find any new work part
take get place made live where after back little only round man year came show every good me give
our under name very through just form sentence great think say help low line differ turn cause much
mean before move right boy old too same tell does set three want air well also play small end put
home read hand port large spell add even land here must big high such follow act why ask men change
went light kind off need house picture try us again animal point mother world near build self earth
father head stand own page should country found answer school grow study still learn plant cover
food sun four between state keep eye never last let thought city tree cross farm hard start might
story saw far sea draw left late run don't while press close night real life few north open seem
together next white children begin got walk example ease paper group always music those both mark
often letter until mile river car feet care second book carry took science eat room friend began
idea fish mountain stop once base hear horse cut sure watch color face wood main enough plain girl
usual young ready above ever red list though feel talk bird soon body dog family direct pose leave
song measure door product black short numeral class wind question happen complete ship area half
rock order fire south problem piece told knew pass since top whole king space heard best hour better
true during hundred five remember step early hold west ground interest reach fast verb sing listen
six table travel less morning ten simple several vowel toward war lay against pattern slow center
love person money serve appear road map rain rule govern pull cold notice voice unit power town fine
certain fly fall lead cry dark machine note wait plan figure star box noun field rest correct able
pound done beauty drive stood contain front teach week final gave green oh quick develop ocean warm
free minute strong special mind behind clear tail produce fact street inch multiply nothing course
stay wheel full force blue object decide surface deep moon island foot system busy test record boat
common gold possible plane stead dry wonder laugh thousand ago ran check game shape equate miss
brought heat snow tire bring yes distant fill east paint language among`)

var syllables = strings.Fields(`ba be bi bo bu ca ce ci co cu da de di do du fa fe fi fo ga ge gi go
ha he hi ho la le li lo lu ma me mi mo mu na ne ni no nu pa pe pi po pu ra re ri ro ru sa se si so
su ta te ti to tu va ve vi vo za ze zi zo tion ment ness able ing er est ly ous ive al ic ity str pl
tr gr br cr dr fl gl sl sp st th sh ch ph qu wr kn`)

// proseText returns about n bytes of English-like prose, the same for the
// same seed.
func proseText(n int, seed uint64) string {
	r := rand.New(rand.NewPCG(seed, 1))
	rare := make([]string, 20000)
	for i := range rare {
		var sb strings.Builder
		for k := 2 + r.IntN(3); k > 0; k-- {
			sb.WriteString(syllables[r.IntN(len(syllables))])
		}
		rare[i] = sb.String()
	}
	zipf := rand.NewZipf(r, 1.1, 3, uint64(len(rare)-1))
	var sb strings.Builder
	for sb.Len() < n {
		words := 6 + r.IntN(20)
		for i := 0; i < words; i++ {
			var w string
			if r.IntN(10) < 7 {
				w = commonWords[r.IntN(len(commonWords))]
			} else {
				w = rare[zipf.Uint64()]
			}
			switch {
			case i == 0:
				w = strings.ToUpper(w[:1]) + w[1:]
			case r.IntN(40) == 0:
				w = strconv.Itoa(r.IntN(3000))
			case r.IntN(50) == 0:
				w = strings.ToUpper(w[:1]) + w[1:]
			}
			if i > 0 {
				sb.WriteByte(' ')
			}
			sb.WriteString(w)
			if i < words-1 && r.IntN(12) == 0 {
				sb.WriteString([]string{",", ",", ";", ":", " -"}[r.IntN(5)])
			}
		}
		sb.WriteString([]string{".", ".", ".", "?", "!"}[r.IntN(5)])
		if r.IntN(6) == 0 {
			sb.WriteString("\n\n")
		} else {
			sb.WriteByte(' ')
		}
	}
	return sb.String()
}

// benchText is the benchmark input: $CLAWRL_BENCH_TEXT when set (any text
// file), else 512 KiB of generated prose.
func benchText(b *testing.B) string {
	if p := os.Getenv("CLAWRL_BENCH_TEXT"); p != "" {
		data, err := os.ReadFile(p)
		if err != nil {
			b.Fatal(err)
		}
		return string(data)
	}
	return proseText(512<<10, 7)
}

// BenchmarkEncode measures Encode with the Qwen3 tokenizer on prose: warm
// (the word cache filled by earlier iterations, as in a server) and cold (a
// fresh cache each iteration, so every word type is merged once).
func BenchmarkEncode(b *testing.B) {
	tok := qwen3Tokenizer(b)
	text := benchText(b)
	b.Run("warm", func(b *testing.B) {
		b.SetBytes(int64(len(text)))
		for b.Loop() {
			tok.Encode(text)
		}
	})
	b.Run("cold", func(b *testing.B) {
		b.SetBytes(int64(len(text)))
		for b.Loop() {
			b.StopTimer()
			c := *tok
			c.model.cache = newWordCache()
			b.StartTimer()
			c.Encode(text)
		}
	})
	b.Run("regexp2", func(b *testing.B) {
		// The same pattern through the regexp engine instead of the
		// hand-written matcher, cold.
		m, err := newRegexMatcher(PatternQwen2)
		if err != nil {
			b.Fatal(err)
		}
		b.SetBytes(int64(len(text)))
		for b.Loop() {
			b.StopTimer()
			c := *tok
			c.model.cache = newWordCache()
			c.pre = splitStep{m: m, behavior: behaviorIsolated}
			b.StartTimer()
			c.Encode(text)
		}
	})
}

// BenchmarkPreTokenize measures the Split step alone.
func BenchmarkPreTokenize(b *testing.B) {
	text := benchText(b)
	re, err := newRegexMatcher(PatternQwen2)
	if err != nil {
		b.Fatal(err)
	}
	for _, c := range []struct {
		name string
		m    matcher
	}{{"hand", qwenMatcher{maxDigits: 1}}, {"regexp2", re}} {
		b.Run(c.name, func(b *testing.B) {
			b.SetBytes(int64(len(text)))
			for b.Loop() {
				n := 0
				c.m.find(text, func(int, int) { n++ })
			}
		})
	}
}

// BenchmarkDecode measures Decode with the Qwen3 tokenizer.
func BenchmarkDecode(b *testing.B) {
	tok := qwen3Tokenizer(b)
	text := benchText(b)
	ids := tok.Encode(text)
	b.SetBytes(int64(len(text)))
	for b.Loop() {
		tok.Decode(ids)
	}
}

// BenchmarkTrain measures training a 2k vocabulary on 1 MiB of prose.
func BenchmarkTrain(b *testing.B) {
	text := proseText(1<<20, 3)
	docs := strings.SplitAfter(text, "\n\n")
	b.SetBytes(int64(len(text)))
	for b.Loop() {
		if _, err := Train(func(yield func(string) bool) {
			for _, d := range docs {
				if !yield(d) {
					return
				}
			}
		}, TrainOptions{VocabSize: 2048}); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkLoad measures building the Qwen3 tokenizer from tokenizer.json.
func BenchmarkLoad(b *testing.B) {
	qwen3Tokenizer(b) // skips when the files are absent
	data, err := os.ReadFile(filepath.Join(qwen3.dir, "tokenizer.json"))
	if err != nil {
		b.Fatal(err)
	}
	b.SetBytes(int64(len(data)))
	for b.Loop() {
		if _, err := FromJSON(data); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkEncodeSPM encodes BenchmarkEncode's text with the
// SentencePiece tokenizer (spm_test.go) in its legacy layout, where no
// pre-tokenizer cuts the text into words (each piece between special
// tokens is merged whole, on the heap) and in the Metaspace layout with
// split, where every "▁" starts a word that the word cache keeps.
func BenchmarkEncodeSPM(b *testing.B) {
	tok := spmTokenizer(b)
	split, err := FromJSON(editJSON(b, tok.TokenizerJSON(), func(m map[string]any) {
		m["normalizer"] = nil
		m["pre_tokenizer"] = map[string]any{"type": "Metaspace", "replacement": metaspace, "prepend_scheme": "first", "split": true}
	}))
	if err != nil {
		b.Fatal(err)
	}
	text := benchText(b)
	for _, c := range []struct {
		name string
		tok  *Tokenizer
	}{{"legacy", tok}, {"metaspace-split", split}} {
		b.Run(c.name, func(b *testing.B) {
			b.SetBytes(int64(len(text)))
			for b.Loop() {
				c.tok.Encode(text)
			}
		})
	}
}
