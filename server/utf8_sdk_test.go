package server

import (
	"context"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/openai/openai-go/v3"

	"github.com/clawrl/clawrl/rollout"
	"github.com/clawrl/clawrl/session"
)

// Replies whose tokens are not valid UTF-8 (a lone lead byte, a stray
// continuation byte, streamed and not) reach the official Go SDK as valid
// text with U+FFFD, and the SDK's own replay of the conversation continues
// the same session: the turn gets its next state, with no new session
// inferred. (Before the lossy decoding at the source and the U+FFFD-aware
// session digest, the replayed history did not match and each turn started
// a session of its own; either of the two alone keeps this test passing.)
func TestInvalidUTF8ReplayThroughSDK(t *testing.T) {
	for _, stream := range []bool{false, true} {
		e := newEnv(t)
		n := 0
		e.gen.reply = func(string, rollout.Request) script {
			n++
			return script{text: []string{"caf\xe2 ok", "x\x80y \xf0\x9f done", "fine"}[(n-1)%3]}
		}
		ctx := context.Background()
		msgs := []openai.ChatCompletionMessageParamUnion{openai.UserMessage("First?")}
		var sessionIDs []string
		for turn := range 3 {
			p := openai.ChatCompletionNewParams{Model: "clawrl-test", Messages: msgs}
			var reply openai.ChatCompletionMessage
			if stream {
				s := e.client.Chat.Completions.NewStreaming(ctx, p)
				acc := openai.ChatCompletionAccumulator{}
				for s.Next() {
					acc.AddChunk(s.Current())
				}
				if err := s.Err(); err != nil {
					t.Fatal(err)
				}
				reply = acc.Choices[0].Message
			} else {
				resp, err := e.client.Chat.Completions.New(ctx, p)
				if err != nil {
					t.Fatal(err)
				}
				reply = resp.Choices[0].Message
			}
			if !utf8.ValidString(reply.Content) || (turn < 2 && !strings.ContainsRune(reply.Content, utf8.RuneError)) {
				t.Fatalf("stream %v turn %d: reply %q", stream, turn, reply.Content)
			}
			msgs = append(msgs, reply.ToParam(), openai.UserMessage("And then?"))
			for _, tr := range e.turns() {
				sessionIDs = append(sessionIDs, tr.SessionID)
				if tr.End != session.EndNextState || len(tr.NextState) != 1 || tr.NextState[0].Content != "And then?" {
					t.Errorf("stream %v: completed turn %d ended %s with next state %v", stream, tr.Index, tr.End, tr.NextState)
				}
			}
		}
		if len(sessionIDs) != 2 || sessionIDs[0] != sessionIDs[1] {
			t.Errorf("stream %v: replayed turns completed in sessions %v; want two turns of one session", stream, sessionIDs)
		}
	}
}
