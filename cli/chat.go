package cli

import (
	"bufio"
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/signal"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/clawrl/clawrl/apiclient"
	"github.com/spf13/cobra"
)

type chatFlags struct {
	baseURL, apiKey, model, system string
	temperature                    float64
	maxTokens                      int
}

func (a *app) chatCmd() *cobra.Command {
	var f chatFlags
	cmd := &cobra.Command{
		Use:   "chat",
		Short: "Chat with a clawrl (or any OpenAI-compatible) server from the terminal",
		Long: `chat is a terminal client for an OpenAI-compatible chat API: by default the
clawrl daemon on server.host:server.port, or any --base-url. Answers stream as
they are generated; each is followed by the weight version that produced it
(clawrl's X-Weight-Version header, or the system fingerprint).

The conversation is one session (sent as X-Session-Id), so the daemon reads
each of your replies as feedback on the answer before it: correcting the
assistant, or thanking it, teaches it. Explicit feedback on the last answer:

  /good [text]    thumbs up (optionally with a comment)
  /bad [text]     thumbs down (optionally with what was wrong)
  /hint <text>    a hint: what the answer should have done
  /new            start a new session (forget the conversation)
  /help           this list
  /quit           leave (or end of input, Ctrl-D)

Feedback goes to POST /v1/feedback, a clawrl extension; other servers say
they do not take it.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			c := &chatClient{
				base: strings.TrimRight(f.baseURL, "/"), key: f.apiKey, model: f.model, system: f.system,
				temperature: f.temperature, maxTokens: f.maxTokens,
				http: &http.Client{}, out: cmd.OutOrStdout(),
			}
			if c.base == "" {
				c.base = a.defaultBaseURL()
			}
			if c.key == "" {
				c.key = a.defaultAPIKey()
			}
			// Ctrl-C stops the answer being streamed; at the prompt it
			// leaves.
			sigs := make(chan os.Signal, 1)
			signal.Notify(sigs, os.Interrupt)
			defer signal.Stop(sigs)
			go func() {
				for range sigs {
					if !c.interrupt() {
						fmt.Fprintln(c.out)
						os.Exit(130)
					}
				}
			}()
			return c.run(cmd.Context(), cmd.InOrStdin())
		},
	}
	fl := cmd.Flags()
	fl.StringVar(&f.baseURL, "base-url", "", "API base URL (default: http://server.host:server.port/v1)")
	fl.StringVar(&f.apiKey, "api-key", "", "bearer key (default: $OPENAI_API_KEY, else the first of $CLAWRL_API_KEYS / server.api_keys)")
	fl.StringVar(&f.model, "model", "", "model id (default: the first of GET /models)")
	fl.StringVar(&f.system, "system", "", "system message")
	fl.Float64VarP(&f.temperature, "temperature", "t", -1, "sampling temperature (< 0: the server's default)")
	fl.IntVarP(&f.maxTokens, "max-tokens", "n", 0, "most tokens per answer (0: the server's default)")
	return cmd
}

// defaultBaseURL is the local daemon's API, from the config.
func (a *app) defaultBaseURL() string {
	return "http://" + localAddr(net.JoinHostPort(a.cfg.Server.Host, strconv.Itoa(a.cfg.Server.Port))) + "/v1"
}

// localAddr is the address to reach a daemon listening on addr from this
// machine: a wildcard host becomes loopback.
func localAddr(addr string) string {
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		return addr
	}
	switch host {
	case "", "0.0.0.0":
		host = "127.0.0.1"
	case "::":
		host = "::1"
	}
	return net.JoinHostPort(host, port)
}

// defaultAPIKey is $OPENAI_API_KEY, else the daemon's first key (which
// $CLAWRL_API_KEYS sets).
func (a *app) defaultAPIKey() string {
	if k := os.Getenv("OPENAI_API_KEY"); k != "" {
		return k
	}
	for _, k := range splitList(os.Getenv("CLAWRL_API_KEYS")) {
		return k
	}
	if len(a.cfg.Server.APIKeys) > 0 {
		return a.cfg.Server.APIKeys[0]
	}
	return ""
}

// chatClient is the state of a chat: the conversation, the session, the
// last response's id.
type chatClient struct {
	base, key, model, system string
	temperature              float64 // < 0: not sent
	maxTokens                int
	http                     *http.Client
	out                      io.Writer

	session  string
	messages []chatMessage
	lastID   string
	noFeedbk bool // the server has no /feedback endpoint

	mu     sync.Mutex
	cancel context.CancelFunc // of the request in flight, or nil
}

// interrupt cancels the request in flight; false means there is none.
func (c *chatClient) interrupt() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.cancel == nil {
		return false
	}
	c.cancel()
	return true
}

func (c *chatClient) setCancel(f context.CancelFunc) {
	c.mu.Lock()
	c.cancel = f
	c.mu.Unlock()
}

type chatMessage struct {
	Role      string          `json:"role"`
	Content   string          `json:"content"`
	ToolCalls json.RawMessage `json:"tool_calls,omitempty"`
}

func newSessionID() string {
	b := make([]byte, 8)
	_, _ = rand.Read(b)
	return "chat-" + hex.EncodeToString(b)
}

func (c *chatClient) printf(format string, args ...any) { fmt.Fprintf(c.out, format, args...) }

// run reads lines from in until /quit or the end of input.
func (c *chatClient) run(ctx context.Context, in io.Reader) error {
	if c.model == "" {
		id, version, err := c.firstModel(ctx)
		if err != nil {
			return fmt.Errorf("chat: %w (pass --model, or check --base-url)", err)
		}
		c.model = id
		if version != "" {
			version = ", weights v" + version
		}
		c.printf("model %s at %s%s\n", c.model, c.base, version)
	} else {
		c.printf("model %s at %s\n", c.model, c.base)
	}
	c.reset()
	c.printf("session %s. Type a message; /good, /bad, /hint TEXT give feedback, /new starts over, /quit leaves.\n", c.session)
	sc := bufio.NewScanner(in)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for {
		c.printf("> ")
		if !sc.Scan() {
			c.printf("\n")
			return sc.Err()
		}
		if ctx.Err() != nil {
			return nil
		}
		line := strings.TrimSpace(sc.Text())
		if line == "" {
			continue
		}
		if strings.HasPrefix(line, "/") {
			if quit := c.command(ctx, line); quit {
				return nil
			}
			continue
		}
		c.send(ctx, line)
	}
}

func (c *chatClient) reset() {
	c.session = newSessionID()
	c.messages = nil
	if c.system != "" {
		c.messages = append(c.messages, chatMessage{Role: "system", Content: c.system})
	}
	c.lastID = ""
}

// command runs a /command; it reports whether to quit.
func (c *chatClient) command(ctx context.Context, line string) bool {
	name, arg, _ := strings.Cut(line, " ")
	arg = strings.TrimSpace(arg)
	switch name {
	case "/quit", "/exit", "/q":
		return true
	case "/new", "/reset":
		c.reset()
		c.printf("new session %s\n", c.session)
	case "/good", "/up", "/+":
		c.feedback(ctx, 1, arg)
	case "/bad", "/down", "/-":
		c.feedback(ctx, -1, arg)
	case "/hint":
		if arg == "" {
			c.printf("usage: /hint TEXT (what the last answer should have done)\n")
			break
		}
		c.feedback(ctx, 0, arg)
	case "/help", "/?":
		c.printf("/good [text]   thumbs up on the last answer\n/bad [text]    thumbs down\n/hint TEXT     a hint for the last answer\n" +
			"/new           new session\n/quit          leave\nAnything else is a message; your replies are feedback too.\n")
	default:
		c.printf("unknown command %s (try /help)\n", name)
	}
	return false
}

func (c *chatClient) newRequest(ctx context.Context, method, path string, body any) (*http.Request, error) {
	var r io.Reader
	if body != nil {
		b, err := json.Marshal(body)
		if err != nil {
			return nil, err
		}
		r = bytes.NewReader(b)
	}
	req, err := http.NewRequestWithContext(ctx, method, c.base+path, r)
	if err != nil {
		return nil, err
	}
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	if c.key != "" {
		req.Header.Set("Authorization", "Bearer "+c.key)
	}
	return req, nil
}

// firstModel returns the first model of GET /models and its weight version
// (clawrl's field; "" elsewhere).
func (c *chatClient) firstModel(ctx context.Context) (string, string, error) {
	req, err := c.newRequest(ctx, http.MethodGet, "/models", nil)
	if err != nil {
		return "", "", err
	}
	resp, err := c.http.Do(req)
	if err != nil {
		return "", "", err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return "", "", fmt.Errorf("GET %s/models: %s", c.base, apiclient.ReadError(resp).Message)
	}
	var list struct {
		Data []struct {
			ID            string  `json:"id"`
			WeightVersion *uint64 `json:"weight_version"`
		} `json:"data"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&list); err != nil {
		return "", "", fmt.Errorf("GET %s/models: %w", c.base, err)
	}
	if len(list.Data) == 0 {
		return "", "", fmt.Errorf("GET %s/models: no models", c.base)
	}
	v := ""
	if list.Data[0].WeightVersion != nil {
		v = strconv.FormatUint(*list.Data[0].WeightVersion, 10)
	}
	return list.Data[0].ID, v, nil
}

// chunk is one streamed chat.completion.chunk (or a whole completion, when
// a server does not stream).
// send sends the user's message and streams the answer.
func (c *chatClient) send(ctx context.Context, text string) {
	c.messages = append(c.messages, chatMessage{Role: "user", Content: text})
	body := map[string]any{
		"model": c.model, "messages": c.messages, "stream": true,
		"stream_options": map[string]any{"include_usage": true},
	}
	if c.temperature >= 0 {
		body["temperature"] = c.temperature
	}
	if c.maxTokens > 0 {
		body["max_tokens"] = c.maxTokens
	}
	rctx, cancel := context.WithCancel(ctx)
	c.setCancel(cancel)
	answer, err := c.stream(rctx, body)
	c.setCancel(nil)
	interrupted := rctx.Err() != nil && ctx.Err() == nil
	cancel()
	if err != nil {
		c.messages = c.messages[:len(c.messages)-1] // not part of the conversation
		if interrupted {
			c.printf("\n(interrupted; the message is dropped from the conversation)\n")
		} else {
			c.printf("error: %v\n", err)
		}
		return
	}
	c.messages = append(c.messages, answer)
}

type toolCallAcc struct {
	ID       string `json:"id"`
	Type     string `json:"type"`
	Function struct {
		Name      string `json:"name"`
		Arguments string `json:"arguments"`
	} `json:"function"`
}

// stream posts a chat completion and prints the answer as it arrives.
func (c *chatClient) stream(ctx context.Context, body map[string]any) (chatMessage, error) {
	req, err := c.newRequest(ctx, http.MethodPost, "/chat/completions", body)
	if err != nil {
		return chatMessage{}, err
	}
	req.Header.Set("X-Session-Id", c.session)
	req.Header.Set("Accept", "text/event-stream")
	start := time.Now()
	resp, err := c.http.Do(req)
	if err != nil {
		return chatMessage{}, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return chatMessage{}, apiclient.ReadError(resp)
	}
	version := resp.Header.Get("X-Weight-Version")
	var content, reasoning strings.Builder
	var calls []*toolCallAcc
	tokens := -1
	id, fp := "", ""
	inReasoning := false
	apply := func(m apiclient.Delta) {
		if m.ReasoningContent != nil && *m.ReasoningContent != "" {
			if !inReasoning {
				c.printf("[thinking] ")
				inReasoning = true
			}
			reasoning.WriteString(*m.ReasoningContent)
			c.printf("%s", *m.ReasoningContent)
		}
		if m.Content != nil && *m.Content != "" {
			if inReasoning {
				c.printf("\n")
				inReasoning = false
			}
			content.WriteString(*m.Content)
			c.printf("%s", *m.Content)
		}
		for _, tc := range m.ToolCalls {
			for len(calls) <= tc.Index {
				calls = append(calls, &toolCallAcc{Type: "function"})
			}
			acc := calls[tc.Index]
			if tc.ID != "" {
				acc.ID = tc.ID
			}
			acc.Function.Name += tc.Function.Name
			acc.Function.Arguments += tc.Function.Arguments
		}
	}
	err = apiclient.Read(resp, func(ck *apiclient.Chunk) error {
		if ck.ID != "" {
			id = ck.ID
		}
		if ck.SystemFingerprint != "" {
			fp = ck.SystemFingerprint
		}
		if ck.Usage != nil {
			tokens = ck.Usage.CompletionTokens
		}
		for _, ch := range ck.Choices {
			if ch.Message != nil {
				apply(*ch.Message)
			} else {
				apply(ch.Delta)
			}
		}
		return nil
	})
	if err != nil {
		c.printf("\n")
		return chatMessage{}, err
	}
	for _, tc := range calls {
		if content.Len() > 0 || tc != calls[0] {
			c.printf("\n")
		}
		c.printf("[tool call] %s(%s)", tc.Function.Name, tc.Function.Arguments)
	}
	c.printf("\n")
	c.lastID = id
	if version == "" {
		version = strings.TrimPrefix(fp, "clawrl-v")
		if version == fp {
			version = "" // someone else's fingerprint
		}
	}
	var info []string
	switch {
	case version != "":
		info = append(info, "weights v"+version)
	case fp != "":
		info = append(info, fp)
	}
	if tokens >= 0 {
		info = append(info, fmt.Sprintf("%d tokens", tokens))
	}
	info = append(info, time.Since(start).Round(10*time.Millisecond).String())
	c.printf("  (%s)\n", strings.Join(info, " · "))
	msg := chatMessage{Role: "assistant", Content: content.String()}
	if len(calls) > 0 {
		msg.ToolCalls, _ = json.Marshal(calls)
	}
	return msg, nil
}

// feedback posts a thumb (+1, −1, or 0 for none) and/or text on the last
// answer.
func (c *chatClient) feedback(ctx context.Context, thumb int, text string) {
	if c.noFeedbk {
		c.printf("this server does not take feedback (it has no /v1/feedback); your replies in the conversation still count where the server trains on them\n")
		return
	}
	if c.lastID == "" {
		c.printf("nothing to give feedback on yet\n")
		return
	}
	body := map[string]any{"response_id": c.lastID}
	if thumb != 0 {
		body["thumb"] = thumb
	}
	if text != "" {
		body["text"] = text
	}
	req, err := c.newRequest(ctx, http.MethodPost, "/feedback", body)
	if err != nil {
		c.printf("error: %v\n", err)
		return
	}
	req.Header.Set("X-Session-Id", c.session)
	resp, err := c.http.Do(req)
	if err != nil {
		c.printf("error: %v\n", err)
		return
	}
	defer resp.Body.Close()
	switch {
	case resp.StatusCode == http.StatusOK:
		_, _ = io.Copy(io.Discard, resp.Body)
		what := map[int]string{1: "thumbs up", -1: "thumbs down", 0: "hint"}[thumb]
		c.printf("feedback sent (%s on %s)\n", what, c.lastID)
	case resp.StatusCode == http.StatusNotFound || resp.StatusCode == http.StatusMethodNotAllowed:
		if e := apiclient.ReadError(resp); e.CodeString() == "turn_not_found" {
			c.printf("the server did not record that answer for training (%s)\n", e.Message)
			return
		}
		c.noFeedbk = true
		c.printf("this server does not take feedback (POST %s/feedback: %s); /good, /bad and /hint are clawrl extensions\n", c.base, resp.Status)
	default:
		c.printf("feedback failed: %s: %s\n", resp.Status, apiclient.ReadError(resp).Message)
	}
}
