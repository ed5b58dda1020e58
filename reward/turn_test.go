package reward

import (
	"slices"
	"strings"
	"testing"
	"time"
)

func testTurn() Turn {
	return Turn{
		ID:             "chatcmpl-1/0",
		PromptTokens:   []int32{1, 2, 3},
		ResponseTokens: []int32{4, 5},
		LogProbs:       []float32{-0.5, -1.5},
		Version:        7,
	}
}

func TestBuildSample(t *testing.T) {
	teacher := []float32{-0.25, -0.75}
	tests := []struct {
		name        string
		o           Outcome
		kind        Kind
		reward      int
		withTeacher bool
	}{
		{"hint and +1", Outcome{Reward: 1, Hint: "Check the path.", TeacherLogProbs: teacher}, KindBoth, 1, true},
		{"hint and -1", Outcome{Reward: -1, Hint: "Check the path.", TeacherLogProbs: teacher}, KindBoth, -1, true},
		{"hint only", Outcome{Hint: "Check the path.", TeacherLogProbs: teacher}, KindDistill, 0, true},
		{"vote +1 only", Outcome{Reward: 1}, KindBinary, 1, false},
		{"vote -1 only", Outcome{Reward: -1}, KindBinary, -1, false},
		{"neither", Outcome{}, KindNone, 0, false},
		{"tie, no hint", Outcome{Votes: []int{1, -1}, Tie: true}, KindNone, 0, false},
		{"hint but teacher failed", Outcome{Reward: 1, Hint: "Check the path."}, KindBinary, 1, false},
		{"hint but teacher failed, no vote", Outcome{Hint: "Check the path."}, KindNone, 0, false},
		{"teacher log-probs of the wrong length", Outcome{Hint: "Check the path.", TeacherLogProbs: teacher[:1]}, KindNone, 0, false},
		{"teacher log-probs without a hint", Outcome{Reward: -1, TeacherLogProbs: teacher}, KindBinary, -1, false},
		{"out-of-range reward", Outcome{Reward: 3}, KindNone, 0, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			turn := testTurn()
			s := BuildSample(turn, tt.o)
			if s.Kind != tt.kind || s.Reward != tt.reward {
				t.Errorf("kind %v, reward %d; want %v, %d", s.Kind, s.Reward, tt.kind, tt.reward)
			}
			if (s.TeacherLogProbs != nil) != tt.withTeacher {
				t.Errorf("teacher log-probs %v; want present=%v", s.TeacherLogProbs, tt.withTeacher)
			}
			if s.TurnID != turn.ID || s.Version != turn.Version || !slices.Equal(s.PromptTokens, turn.PromptTokens) ||
				!slices.Equal(s.ResponseTokens, turn.ResponseTokens) || !slices.Equal(s.LogProbs, turn.LogProbs) {
				t.Errorf("turn data not carried: %+v", s)
			}
			if s.Hint != tt.o.Hint {
				t.Errorf("hint %q; want %q", s.Hint, tt.o.Hint)
			}
		})
	}
}

func TestTurnValidate(t *testing.T) {
	tests := []struct {
		name   string
		change func(*Turn)
		want   string // substring of the error, "" for none
	}{
		{"ok", func(*Turn) {}, ""},
		{"no prompt", func(t *Turn) { t.PromptTokens = nil }, "no prompt tokens"},
		{"no response", func(t *Turn) { t.ResponseTokens, t.LogProbs = nil, nil }, "no response tokens"},
		{"log-prob count", func(t *Turn) { t.LogProbs = t.LogProbs[:1] }, "1 log-probs for 2"},
		{"bad thumb", func(t *Turn) { t.Feedback = []Feedback{{Thumb: 2}} }, "thumb 2"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			turn := testTurn()
			tt.change(&turn)
			err := turn.validate()
			if tt.want == "" && err != nil || tt.want != "" && (err == nil || !strings.Contains(err.Error(), tt.want)) {
				t.Errorf("validate() = %v; want %q", err, tt.want)
			}
		})
	}
}

func TestExplicitFeedback(t *testing.T) {
	tests := []struct {
		fb    []Feedback
		thumb int
		text  string
	}{
		{nil, 0, ""},
		{[]Feedback{{Thumb: 1}}, 1, ""},
		{[]Feedback{{Thumb: -1}, {Thumb: 1}}, 1, ""},
		{[]Feedback{{Thumb: -1}, {Text: "use metric units"}}, -1, "use metric units"},
		{[]Feedback{{Text: " a "}, {Thumb: 1, Text: "b"}}, 1, "a\n\nb"},
	}
	for _, tt := range tests {
		turn := Turn{Feedback: tt.fb}
		thumb, text := turn.explicit()
		if thumb != tt.thumb || text != tt.text {
			t.Errorf("explicit(%v) = %d, %q; want %d, %q", tt.fb, thumb, text, tt.thumb, tt.text)
		}
	}
}

func TestValidateConfig(t *testing.T) {
	tests := []struct {
		name   string
		change func(*Config)
		want   string
	}{
		{"defaults", func(*Config) {}, ""},
		{"openai with policy teacher", func(c *Config) { c.Backend = BackendOpenAI }, ""},
		{"openai with judge teacher", func(c *Config) { c.Backend, c.Teacher = BackendOpenAI, TeacherJudge }, "cannot give"},
		{"local with judge teacher", func(c *Config) { c.Teacher = TeacherJudge }, ""},
		{"unknown backend", func(c *Config) { c.Backend = "remote" }, `backend "remote"`},
		{"unknown teacher", func(c *Config) { c.Teacher = "oracle" }, `teacher "oracle"`},
		{"no votes", func(c *Config) { c.Votes = 0 }, "votes 0"},
		{"greedy with several votes", func(c *Config) { c.Temperature = 0 }, "temperature 0"},
		{"greedy with one vote", func(c *Config) { c.Temperature, c.Votes, c.HintVotes = 0, 1, 1 }, ""},
		{"bad rule", func(c *Config) { c.HintRule = "random" }, "hint rule"},
		{"tiny limit", func(c *Config) { c.Limits.System = 10 }, "limit System"},
		{"no timeout", func(c *Config) { c.Timeout = 0 }, "timeout"},
		{"backoff order", func(c *Config) { c.BackoffMax = time.Millisecond }, "backoff"},
		{"no workers", func(c *Config) { c.Workers = 0 }, "workers"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := DefaultConfig()
			tt.change(&c)
			err := ValidateConfig(c)
			if tt.want == "" && err != nil || tt.want != "" && (err == nil || !strings.Contains(err.Error(), tt.want)) {
				t.Errorf("ValidateConfig() = %v; want %q", err, tt.want)
			}
		})
	}
}
