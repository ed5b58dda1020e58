package corpus

import (
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"strings"

	"github.com/clawrl/clawrl/tokenizer"
)

// Tool-use conversations: tool definitions in the OpenAI form, a request,
// the assistant's <tool_call>, the tool's result and the answer built on it.

type toolParam struct {
	name, typ, desc string
	enum            []string
	required        bool
}

type toolDef struct {
	name, desc string
	params     []toolParam
	// scene makes a request for this tool: the user's message, the call's
	// arguments, the tool's result and the final answer (failed: the
	// result is an error, and the answer reports it).
	scene func(r *rand.Rand) scene
}

type scene struct {
	ask    string
	args   obj
	result string
	answer string
}

// definition is the tool's OpenAI definition, as a client sends it.
func (t *toolDef) definition() json.RawMessage {
	props := obj{}
	var req []string
	for _, p := range t.params {
		o := obj{{"type", p.typ}, {"description", p.desc}}
		if p.enum != nil {
			o = append(o, kv{"enum", p.enum})
		}
		props = append(props, kv{p.name, o})
		if p.required {
			req = append(req, p.name)
		}
	}
	if req == nil {
		req = []string{}
	}
	fn := obj{{"name", t.name}, {"description", t.desc}, {"parameters", obj{{"type", "object"}, {"properties", props}, {"required", req}}}}
	b, err := json.Marshal(obj{{"type", "function"}, {"function", fn}})
	if err != nil {
		panic(err)
	}
	return b
}

var conditions = []string{"sunny", "cloudy", "rainy", "windy", "snowy", "foggy", "clear"}
var timezones = [][2]string{{"Tokyo", "Asia/Tokyo"}, {"London", "Europe/London"}, {"Paris", "Europe/Paris"}, {"New York", "America/New_York"},
	{"Berlin", "Europe/Berlin"}, {"Sydney", "Australia/Sydney"}, {"Chicago", "America/Chicago"}, {"Seoul", "Asia/Seoul"}, {"Cairo", "Africa/Cairo"}}
var topics = []string{"the history of the bicycle", "how to bake bread", "Go generics", "the tallest mountain in Europe", "electric cars",
	"the best hiking trails in Norway", "how vaccines work", "the rules of chess", "Rust ownership", "cheap flights to Lisbon", "the population of Canada",
	"how to learn piano", "Kubernetes pods", "the speed of light", "healthy breakfast ideas"}
var files = []string{"README.md", "main.go", "notes.txt", "config.yaml", "src/app.py", "docs/intro.md", "todo.txt", "data/users.csv", "Makefile", "go.mod"}
var dirs = []string{".", "src", "docs", "/tmp", "/home/sam/project", "data", "tests", "cmd"}
var commands = [][2]string{{"ls", "README.md\nmain.go\ngo.mod"}, {"go test ./...", "ok  \texample.com/app\t0.412s"}, {"git status", "On branch main\nnothing to commit, working tree clean"},
	{"pwd", "/home/sam/project"}, {"date", "Sun Jun  1 10:30:00 UTC 2025"}, {"whoami", "sam"}, {"echo hello", "hello"}, {"python3 --version", "Python 3.11.2"},
	{"df -h .", "Filesystem  Size  Used Avail Use% Mounted on\n/dev/sda1   50G   21G   29G  42% /"}, {"make build", "go build -o bin/app ./cmd/app"}}
var stocks = []string{"AAPL", "MSFT", "GOOG", "AMZN", "TSLA", "NVDA", "IBM", "ORCL"}
var langs = [][2]string{{"Spanish", ""}, {"French", ""}, {"German", ""}, {"Italian", ""}, {"Portuguese", ""}}
var translations = map[string][]string{
	"good morning": {"buenos días", "bonjour", "guten Morgen", "buongiorno", "bom dia"},
	"thank you":    {"gracias", "merci", "danke", "grazie", "obrigado"},
	"see you soon": {"hasta pronto", "à bientôt", "bis bald", "a presto", "até logo"},
	"good night":   {"buenas noches", "bonne nuit", "gute Nacht", "buona notte", "boa noite"},
	"hello":        {"hola", "bonjour", "hallo", "ciao", "olá"},
	"cheese":       {"queso", "fromage", "Käse", "formaggio", "queijo"},
}
var currencies = []string{"USD", "EUR", "GBP", "JPY", "CHF", "CAD"}
var definitions = [][2]string{{"serendipity", "the occurrence of happy events by chance"}, {"ephemeral", "lasting for a very short time"},
	{"ubiquitous", "present everywhere"}, {"laconic", "using very few words"}, {"candid", "truthful and straightforward"},
	{"verbose", "using more words than needed"}, {"idempotent", "giving the same result when applied more than once"}}

func tr(lang string, phrase string) string {
	for i, l := range langs {
		if l[0] == lang {
			return translations[phrase][i]
		}
	}
	return phrase
}

func sortedKeys[V any](m map[string]V) []string {
	ks := make([]string, 0, len(m))
	for k := range m {
		ks = append(ks, k)
	}
	for i := 1; i < len(ks); i++ {
		for j := i; j > 0 && ks[j] < ks[j-1]; j-- {
			ks[j], ks[j-1] = ks[j-1], ks[j]
		}
	}
	return ks
}

var toolDefs = []*toolDef{
	{name: "get_weather", desc: "Get the current weather in a city.",
		params: []toolParam{{"location", "string", "The city, e.g. Paris", nil, true}, {"unit", "string", "Temperature unit", []string{"celsius", "fahrenheit"}, false}},
		scene: func(r *rand.Rand) scene {
			c, t, cond := pick(r, cities), r.IntN(35)-5, pick(r, conditions)
			s := scene{ask: fmt.Sprintf(pick(r, []string{"What's the weather in %s?", "How is the weather in %s today?", "Is it cold in %s right now?", "weather %s"}), c),
				args: obj{{"location", c}}}
			unit, sym := "celsius", "°C"
			if r.IntN(4) == 0 {
				unit, sym, t = "fahrenheit", "°F", t*9/5+32
				s.ask = strings.TrimSuffix(s.ask, "?") + " in fahrenheit?"
				s.args = append(s.args, kv{"unit", "fahrenheit"})
			}
			s.result = jsonText(obj{{"location", c}, {"temperature", t}, {"unit", unit}, {"condition", cond}})
			s.answer = fmt.Sprintf("It is %d%s and %s in %s.", t, sym, cond, c)
			return s
		}},
	{name: "get_time", desc: "Get the current local time in a time zone.",
		params: []toolParam{{"timezone", "string", "IANA time zone name, e.g. Europe/Paris", nil, true}},
		scene: func(r *rand.Rand) scene {
			z := pick(r, timezones)
			tm := fmt.Sprintf("%02d:%02d", r.IntN(24), r.IntN(60))
			return scene{ask: fmt.Sprintf(pick(r, []string{"What time is it in %s?", "Tell me the current time in %s.", "time in %s?"}), z[0]),
				args: obj{{"timezone", z[1]}}, result: jsonText(obj{{"timezone", z[1]}, {"time", tm}}), answer: fmt.Sprintf("It is %s in %s.", tm, z[0])}
		}},
	{name: "search_web", desc: "Search the web and return the top results.",
		params: []toolParam{{"query", "string", "The search query", nil, true}},
		scene: func(r *rand.Rand) scene {
			t := pick(r, topics)
			slug := strings.ReplaceAll(t, " ", "-")
			return scene{ask: fmt.Sprintf(pick(r, []string{"Search the web for %s.", "Look up %s.", "Can you find information about %s?", "Google %s"}), t),
				args:   obj{{"query", t}},
				result: jsonText(obj{{"results", []obj{{{"title", titleCase(t)}, {"url", "https://example.com/" + slug}}}}}),
				answer: fmt.Sprintf("I found a page about %s: https://example.com/%s", t, slug)}
		}},
	{name: "read_file", desc: "Read a text file from the workspace.",
		params: []toolParam{{"path", "string", "Path of the file", nil, true}},
		scene: func(r *rand.Rand) scene {
			f := pick(r, files)
			s := scene{ask: fmt.Sprintf(pick(r, []string{"Show me the contents of %s.", "Read %s.", "What's in %s?", "Open the file %s."}), f), args: obj{{"path", f}}}
			if r.IntN(5) == 0 {
				s.result = jsonText(obj{{"error", "file not found: " + f}})
				s.answer = fmt.Sprintf("I could not read %s: the file does not exist.", f)
				return s
			}
			content := pick(r, []string{"# Project\nA small demo.", "hello world", "TODO: write tests", "port: 8080", "buy milk\ncall Bob"})
			s.result = jsonText(obj{{"path", f}, {"content", content}})
			s.answer = fmt.Sprintf("%s contains:\n%s", f, content)
			return s
		}},
	{name: "write_file", desc: "Write text to a file in the workspace, replacing it.",
		params: []toolParam{{"path", "string", "Path of the file", nil, true}, {"content", "string", "The text to write", nil, true}},
		scene: func(r *rand.Rand) scene {
			f, c := pick(r, files), pick(r, phrases)
			return scene{ask: fmt.Sprintf(pick(r, []string{"Write '%[2]s' to %[1]s.", "Create the file %[1]s with the text '%[2]s'.", "Save '%[2]s' in %[1]s."}), f, c),
				args: obj{{"path", f}, {"content", c}}, result: jsonText(obj{{"ok", true}, {"bytes", len(c)}}), answer: fmt.Sprintf("Done: I wrote %d bytes to %s.", len(c), f)}
		}},
	{name: "list_directory", desc: "List the files in a directory.",
		params: []toolParam{{"path", "string", "The directory", nil, true}},
		scene: func(r *rand.Rand) scene {
			d := pick(r, dirs)
			n := 1 + r.IntN(4)
			var es []string
			for _, i := range r.Perm(len(files))[:n] {
				es = append(es, files[i])
			}
			return scene{ask: fmt.Sprintf(pick(r, []string{"What files are in %s?", "List the directory %s.", "ls %s"}), d),
				args: obj{{"path", d}}, result: jsonText(obj{{"entries", es}}), answer: fmt.Sprintf("%s contains: %s.", d, strings.Join(es, ", "))}
		}},
	{name: "run_command", desc: "Run a shell command in the workspace and return its output.",
		params: []toolParam{{"command", "string", "The shell command", nil, true}},
		scene: func(r *rand.Rand) scene {
			c := pick(r, commands)
			s := scene{ask: fmt.Sprintf(pick(r, []string{"Run %s.", "Please run `%s`.", "Execute the command %s", "Can you run %s for me?"}), c[0]), args: obj{{"command", c[0]}}}
			if r.IntN(6) == 0 {
				s.result = jsonText(obj{{"exit_code", 127}, {"stderr", "command not found"}})
				s.answer = fmt.Sprintf("The command `%s` failed with exit code 127: command not found.", c[0])
				return s
			}
			s.result = jsonText(obj{{"exit_code", 0}, {"stdout", c[1]}})
			s.answer = fmt.Sprintf("The command succeeded. Output:\n%s", c[1])
			return s
		}},
	{name: "calculator", desc: "Evaluate an arithmetic expression.",
		params: []toolParam{{"expression", "string", "The expression, e.g. 12 * 7", nil, true}},
		scene: func(r *rand.Rand) scene {
			a, b := 10+r.IntN(990), 2+r.IntN(98)
			op := pick(r, []string{"+", "-", "*"})
			v := map[string]int{"+": a + b, "-": a - b, "*": a * b}[op]
			e := fmt.Sprintf("%d %s %d", a, op, b)
			return scene{ask: fmt.Sprintf(pick(r, []string{"Use the calculator to compute %s.", "Calculate %s with the calculator.", "What is %s? Use the tool."}), e),
				args: obj{{"expression", e}}, result: jsonText(obj{{"result", v}}), answer: fmt.Sprintf("%s = %d.", e, v)}
		}},
	{name: "send_email", desc: "Send an email.",
		params: []toolParam{{"to", "string", "Recipient address", nil, true}, {"subject", "string", "Subject line", nil, true}, {"body", "string", "Message text", nil, true}},
		scene: func(r *rand.Rand) scene {
			n := pick(r, names)
			to := strings.ToLower(n) + "@example.com"
			subj := pick(r, []string{"Lunch", "Meeting", "Report", "Hello", "Tomorrow"})
			body := pick(r, []string{"See you at noon.", "The report is ready.", "Can we meet tomorrow?", "Thanks for your help!"})
			return scene{ask: fmt.Sprintf("Email %s with the subject '%s' saying '%s'", to, subj, body),
				args: obj{{"to", to}, {"subject", subj}, {"body", body}}, result: jsonText(obj{{"sent", true}}), answer: fmt.Sprintf("I sent the email to %s.", to)}
		}},
	{name: "create_event", desc: "Add an event to the calendar.",
		params: []toolParam{{"title", "string", "Event title", nil, true}, {"date", "string", "Date as YYYY-MM-DD", nil, true}, {"time", "string", "Start time as HH:MM", nil, false}},
		scene: func(r *rand.Rand) scene {
			title := pick(r, []string{"Standup", "Dentist", "Team lunch", "Project review", "Call with Bob", "Gym"})
			m := r.IntN(12)
			d := 1 + r.IntN(monthDays[m])
			date := fmt.Sprintf("2025-%02d-%02d", m+1, d)
			tm := fmt.Sprintf("%02d:%02d", 8+r.IntN(10), 15*r.IntN(4))
			return scene{ask: fmt.Sprintf("Add %s to my calendar on %s at %s.", title, date, tm),
				args: obj{{"title", title}, {"date", date}, {"time", tm}}, result: jsonText(obj{{"created", true}, {"id", fmt.Sprintf("evt_%d", r.IntN(10000))}}),
				answer: fmt.Sprintf("I added %s on %s at %s to your calendar.", title, date, tm)}
		}},
	{name: "get_stock_price", desc: "Get the latest price of a stock.",
		params: []toolParam{{"symbol", "string", "Ticker symbol, e.g. AAPL", nil, true}},
		scene: func(r *rand.Rand) scene {
			s := pick(r, stocks)
			p := fmt.Sprintf("%d.%02d", 20+r.IntN(500), r.IntN(100))
			return scene{ask: fmt.Sprintf(pick(r, []string{"What's the price of %s?", "How much is %s stock trading at?", "Get me the stock price of %s."}), s),
				args: obj{{"symbol", s}}, result: jsonText(obj{{"symbol", s}, {"price", json.Number(p)}, {"currency", "USD"}}), answer: fmt.Sprintf("%s is trading at %s USD.", s, p)}
		}},
	{name: "translate", desc: "Translate text into another language.",
		params: []toolParam{{"text", "string", "The text", nil, true}, {"target_language", "string", "Language to translate into", nil, true}},
		scene: func(r *rand.Rand) scene {
			ph := pick(r, sortedKeys(translations))
			l := pick(r, langs)[0]
			t := tr(l, ph)
			return scene{ask: fmt.Sprintf(pick(r, []string{"Translate '%s' into %s.", "How do you say '%s' in %s?"}), ph, l),
				args: obj{{"text", ph}, {"target_language", l}}, result: jsonText(obj{{"translation", t}}), answer: fmt.Sprintf("In %s, '%s' is '%s'.", l, ph, t)}
		}},
	{name: "convert_currency", desc: "Convert an amount of money between currencies.",
		params: []toolParam{{"amount", "number", "The amount", nil, true}, {"from", "string", "Currency code to convert from", nil, true}, {"to", "string", "Currency code to convert to", nil, true}},
		scene: func(r *rand.Rand) scene {
			a := 5 * (1 + r.IntN(100))
			i := r.Perm(len(currencies))
			f, t := currencies[i[0]], currencies[i[1]]
			v := fmt.Sprintf("%d.%02d", a*(50+r.IntN(100))/100, r.IntN(100))
			return scene{ask: fmt.Sprintf(pick(r, []string{"Convert %d %s to %s.", "How much is %d %s in %s?"}), a, f, t),
				args: obj{{"amount", a}, {"from", f}, {"to", t}}, result: jsonText(obj{{"amount", json.Number(v)}, {"currency", t}}), answer: fmt.Sprintf("%d %s is about %s %s.", a, f, v, t)}
		}},
	{name: "set_reminder", desc: "Set a reminder.",
		params: []toolParam{{"text", "string", "What to remind about", nil, true}, {"time", "string", "When, as HH:MM", nil, true}},
		scene: func(r *rand.Rand) scene {
			what := pick(r, []string{"call mom", "buy milk", "take the medicine", "water the plants", "submit the report", "walk the dog"})
			tm := fmt.Sprintf("%02d:%02d", 6+r.IntN(16), 5*r.IntN(12))
			return scene{ask: fmt.Sprintf(pick(r, []string{"Remind me to %s at %s.", "Set a reminder at %[2]s to %[1]s."}), what, tm),
				args: obj{{"text", what}, {"time", tm}}, result: jsonText(obj{{"ok", true}}), answer: fmt.Sprintf("OK, I will remind you to %s at %s.", what, tm)}
		}},
	{name: "lookup_word", desc: "Look up the definition of an English word.",
		params: []toolParam{{"word", "string", "The word", nil, true}},
		scene: func(r *rand.Rand) scene {
			d := pick(r, definitions)
			return scene{ask: fmt.Sprintf(pick(r, []string{"Look up the word %s in the dictionary.", "What does %s mean? Use the dictionary.", "Define %s."}), d[0]),
				args: obj{{"word", d[0]}}, result: jsonText(obj{{"word", d[0]}, {"definition", d[1]}}), answer: fmt.Sprintf("%s means %s.", titleCase(d[0]), d[1])}
		}},
}

// toolCall makes an assistant tool call with arguments args.
func toolCall(name string, args obj) tokenizer.ToolCall {
	b, err := json.Marshal(args)
	if err != nil {
		panic(err)
	}
	return tokenizer.ToolCall{Type: "function", Function: tokenizer.FunctionCall{Name: name, Arguments: b}}
}

func genTools(r *rand.Rand) Example {
	// The tools offered: the one needed and a few others, shuffled.
	perm := r.Perm(len(toolDefs))
	k := 1 + r.IntN(4)
	offered := perm[:k]
	need := toolDefs[offered[r.IntN(k)]]
	var defs []json.RawMessage
	for _, i := range offered {
		defs = append(defs, toolDefs[i].definition())
	}
	var msgs []tokenizer.Message
	if r.IntN(2) == 0 {
		sys := pick(r, shortSystems)
		if r.IntN(3) == 0 {
			sys = longSystem(r)
		}
		msgs = append(msgs, tokenizer.Message{Role: "system", Content: sys})
	}
	if r.IntN(8) == 0 { // tools offered but not needed
		q := single(genSmallTalk(r))
		return Example{Messages: append(msgs, q.Messages...), Tools: defs, Key: "notool:" + q.Key}
	}
	s := need.scene(r)
	call := toolCall(need.name, s.args)
	msgs = append(msgs, user(s.ask))
	ex := Example{Tools: defs, Key: "tool:" + s.ask, Want: need.name}
	if r.IntN(8) == 0 && need.name != "send_email" { // two calls of the same tool at once
		s2 := need.scene(r)
		msgs[len(msgs)-1] = user(s.ask + " Also: " + lowerFirst(s2.ask))
		ex.Key = "tool2:" + s.ask + s2.ask
		msgs = append(msgs, tokenizer.Message{Role: "assistant", ToolCalls: []tokenizer.ToolCall{call, toolCall(need.name, s2.args)}},
			tokenizer.Message{Role: "tool", Content: s.result, Name: need.name}, tokenizer.Message{Role: "tool", Content: s2.result, Name: need.name},
			assistant(s.answer+"\n"+s2.answer))
		ex.Messages = msgs
		return ex
	}
	am := tokenizer.Message{Role: "assistant", ToolCalls: []tokenizer.ToolCall{call}}
	if r.IntN(6) == 0 {
		am.Content = pick(r, []string{"Let me check.", "I'll look that up.", "One moment."})
	}
	msgs = append(msgs, am, tokenizer.Message{Role: "tool", Content: s.result, Name: need.name}, assistant(s.answer))
	// Agent sessions go on under the same tools: more requests, each
	// calling one of the tools offered.
	for r.IntN(2) == 0 && len(msgs) < 16 {
		t := toolDefs[offered[r.IntN(k)]]
		s := t.scene(r)
		msgs = append(msgs, user(s.ask), tokenizer.Message{Role: "assistant", ToolCalls: []tokenizer.ToolCall{toolCall(t.name, s.args)}},
			tokenizer.Message{Role: "tool", Content: s.result, Name: t.name}, assistant(s.answer))
	}
	if r.IntN(5) == 0 {
		msgs = append(msgs, user(pick(r, []string{"Thanks!", "Great, thank you."})), assistant(pick(r, []string{"You're welcome!", "Happy to help!"})))
	}
	ex.Messages = msgs
	return ex
}

// genSmallTalk is a question that needs no tool.
func genSmallTalk(r *rand.Rand) qa {
	switch r.IntN(3) {
	case 0:
		x := randArith(r)
		return qa{Q: arithQuestion(r, x), A: x.equation() + ".", Key: x.key()}
	case 1:
		p := pick(r, greetingPairs[:3])
		q := pick(r, p[0])
		return qa{Q: q, A: pick(r, p[1]), Key: "greet:" + q}
	}
	return genInstructions(r)
}

func lowerFirst(s string) string {
	if s == "" {
		return s
	}
	return strings.ToLower(s[:1]) + s[1:]
}
