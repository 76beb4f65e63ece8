package downstream_test

import (
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/mas-mcp/mas-mcp/downstream"
	"github.com/mas-mcp/mas-mcp/engine"
	"github.com/mas-mcp/mas-mcp/internal/fakellm"
	"github.com/mas-mcp/mas-mcp/internal/scripted"
	"github.com/mas-mcp/mas-mcp/llm"
)

// newRequestStack has a worker call tool of server sc; the executor
// answers sampling with an LLM of its own (a second fake endpoint that
// answers every request with reply).
func newRequestStack(t *testing.T, sc downstream.ServerConfig, calls []scripted.Call, reply string) *toolStack {
	t.Helper()
	samp := fakellm.New(t)
	samp.Handle(func(c *fakellm.Call) fakellm.Reply { return fakellm.Reply{Content: reply} })
	transport := &http.Transport{}
	client, err := llm.NewOpenAI(llm.OpenAIConfig{BaseURL: samp.BaseURL(), APIKey: "k", Model: "sampler",
		MaxRetries: 0, HTTPClient: &http.Client{Transport: transport}})
	if err != nil {
		t.Fatal(err)
	}
	s := newToolStackWith(t, &downstream.Config{Servers: map[string]downstream.ServerConfig{"srv": sc}}, calls, stackOptions{
		executor: func(ec *downstream.ExecutorConfig) {
			ec.LLM = client
			ec.ConfirmTimeout = time.Minute
		},
	})
	t.Cleanup(func() {
		_ = s.pool.Close()
		transport.CloseIdleConnections()
	})
	return s
}

// fixtureConfig reaches the fixture.
func fixtureConfig(t *testing.T, f *fixture) downstream.ServerConfig {
	t.Cleanup(func() {
		close(f.stop)
		f.CloseClientConnections()
		f.Close()
		http.DefaultTransport.(*http.Transport).CloseIdleConnections()
	})
	return downstream.ServerConfig{URL: f.URL + "/mcp", Timeout: downstream.Duration(time.Minute)}
}

// TestElicitationReachesTheOperator: a downstream server's elicitation
// during an agent's call is put to the task's operator; the answer (free
// text, or a decision) flows back to the server's tool. Stateful servers
// send a request; 2026-07-28 servers return an input request.
func TestElicitationReachesTheOperator(t *testing.T) {
	for _, tc := range []struct {
		name, tool string
		stateless  bool
		answer     func(s *toolStack, q engine.InboxEntry)
		want       string
	}{{
		name: "stateful text", tool: "ask-elicitation", want: "the user answered accept map[name:Ada]",
		answer: func(s *toolStack, q engine.InboxEntry) { reply(s, q, "Ada") },
	}, {
		name: "stateful decision", tool: "ask-elicitation", want: "the user answered accept map[name:Grace]",
		answer: func(s *toolStack, q engine.InboxEntry) {
			if err := s.Sys.AnswerApproval(s.Sys.OperatorID(), q.MessageID,
				engine.Decision{Approve: true, Arguments: map[string]any{"name": "Grace"}}); err != nil {
				s.T.Fatal(err)
			}
		},
	}, {
		name: "stateful decline", tool: "ask-elicitation", want: "the user answered decline map[]",
		answer: func(s *toolStack, q engine.InboxEntry) {
			if err := s.Sys.AnswerApproval(s.Sys.OperatorID(), q.MessageID, engine.Decision{Approve: false}); err != nil {
				s.T.Fatal(err)
			}
		},
	}, {
		name: "input request", tool: "input-elicitation", stateless: true, want: "the user answered accept map[name:Ada]",
		answer: func(s *toolStack, q engine.InboxEntry) { reply(s, q, `{"name": "Ada"}`) },
	}} {
		t.Run(tc.name, func(t *testing.T) {
			f := newFixture(t, tc.stateless)
			s := newRequestStack(t, fixtureConfig(t, f), []scripted.Call{{Server: "srv", Tool: tc.tool, Args: map[string]any{}}}, "")
			w, task := s.startWorker(t, "srv")
			q := s.waitQuestion(s.Sys.OperatorID(), w)
			for _, want := range []string{"Your name?", "srv", tc.tool, "name (string)"} {
				if !strings.Contains(q.Content, want) {
					t.Errorf("the operator's question lacks %q:\n%s", want, q.Content)
				}
			}
			// The agent whose call waits for the answer shows it.
			if a, _ := s.Sys.Agent(w); a.WorkingState != engine.WorkingWaiting || a.WaitingOn != engine.WaitingOnOperator || !strings.Contains(a.WaitingFor, q.MessageID) {
				t.Errorf("while its call's elicitation waits for the operator the agent reads %q, waiting for %q on %q", a.WorkingState, a.WaitingFor, a.WaitingOn)
			}
			tc.answer(s, q)
			s.waitSummary(w, task)
			steps := s.toolSteps(w)
			if len(steps) != 1 || steps[0].ExecutionState != engine.StateFinished {
				t.Fatalf("want one finished tool step\n%s", s.Dump())
			}
			if got := jsonString(steps[0].ExecuteResult["mcp_server_result"]); !strings.Contains(got, tc.want) {
				t.Errorf("result %s lacks %q", got, tc.want)
			}
		})
	}
}

// reply answers the operator's question with free text.
func reply(s *toolStack, q engine.InboxEntry, text string) {
	s.T.Helper()
	if _, err := s.Sys.HumanSend(s.Sys.OperatorID(), engine.HumanMessage{TaskID: q.TaskID, Receiver: []string{q.SenderID},
		Content: text, ReplyTo: q.MessageID}); err != nil {
		s.T.Fatal(err)
	}
}

// TestSamplingAnsweredByTheMAS: with allowSampling, a server's sampling
// request (sent, or as a 2026-07-28 input request) is answered by the
// MAS's LLM; roots are answered from the config.
func TestSamplingAnsweredByTheMAS(t *testing.T) {
	for _, tc := range []struct {
		name, tool, want string
		stateless        bool
	}{
		{name: "request", tool: "ask-sampling", want: "the client's LLM said \\u0026{hi from the MAS"},
		{name: "input request", tool: "input-sampling", stateless: true, want: "got the client's answer"},
		{name: "roots", tool: "ask-roots", want: "the client has 2 roots"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := newFixture(t, tc.stateless)
			sc := fixtureConfig(t, f)
			sc.AllowSampling = true
			sc.Roots = []string{"/srv/data", "file:///home/op/project"}
			s := newRequestStack(t, sc, []scripted.Call{{Server: "srv", Tool: tc.tool, Args: map[string]any{}}}, "hi from the MAS")
			w := s.runWorker(t, "srv")
			steps := s.toolSteps(w)
			if len(steps) != 1 || steps[0].ExecutionState != engine.StateFinished {
				t.Fatalf("want one finished tool step\n%s", s.Dump())
			}
			if got := jsonString(steps[0].ExecuteResult["mcp_server_result"]); !strings.Contains(got, tc.want) {
				t.Errorf("result %s lacks %q", got, tc.want)
			}
		})
	}
}

// TestEverythingElicitationAndSampling: server-everything's elicitation
// tool asks the operator, whose answer reaches the tool; its sampling tool
// is answered by the MAS's LLM.
func TestEverythingElicitationAndSampling(t *testing.T) {
	sc := everythingStdio(t)
	sc.AllowSampling = true
	s := newRequestStack(t, sc, []scripted.Call{
		{Server: "srv", Tool: "trigger-elicitation-request", Args: map[string]any{}},
		{Server: "srv", Tool: "trigger-sampling-request", Args: map[string]any{"prompt": "greet", "maxTokens": 20}},
	}, "hi from the MAS")
	w, task := s.startWorker(t, "srv")
	q := s.waitQuestion(s.Sys.OperatorID(), w)
	for _, want := range []string{"Please provide inputs", "name (string, required)", "check (boolean)"} {
		if !strings.Contains(q.Content, want) {
			t.Errorf("the operator's question lacks %q:\n%s", want, q.Content)
		}
	}
	reply(s, q, `{"name": "Ada Lovelace", "check": "yes", "integer": "7"}`)
	s.waitSummary(w, task)
	steps := s.toolSteps(w)
	if len(steps) != 2 {
		t.Fatalf("want two tool steps\n%s", s.Dump())
	}
	for i, want := range []string{"Name: Ada Lovelace", "hi from the MAS"} {
		got := jsonString(steps[i].ExecuteResult["mcp_server_result"])
		if steps[i].ExecutionState != engine.StateFinished || !strings.Contains(got, want) {
			t.Errorf("step %d: %s %v, result %s; want finished with %q", i, steps[i].ExecutionState, steps[i].ExecuteResult["error"], got, want)
		}
	}
	if got := jsonString(steps[0].ExecuteResult["mcp_server_result"]); !strings.Contains(got, "Favorite Integer: 7") || !strings.Contains(got, "Agreed to terms: true") {
		t.Errorf("the typed fields did not reach the tool: %s", got)
	}
}

// TestMissingArgumentsAsked (spec 001): a call without a required argument
// asks the operator for it; the answer completes the call. Declined, the
// step fails with the reason and the call is not made.
func TestMissingArgumentsAsked(t *testing.T) {
	for _, tc := range []struct {
		name, answer string
		decide       *engine.Decision
		state        string
		want         string
	}{
		{name: "answered", answer: "40", state: engine.StateFinished, want: "The sum of 2 and 40 is 42."},
		{name: "answered by decision", decide: &engine.Decision{Approve: true, Arguments: map[string]any{"b": 5}},
			state: engine.StateFinished, want: "The sum of 2 and 5 is 7."},
		{name: "declined", answer: "decline", state: engine.StateFailed, want: "the operator declined to give the missing arguments"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := newRequestStack(t, everythingStdio(t), []scripted.Call{
				{Server: "srv", Tool: "get-sum", Args: map[string]any{"a": 2}},
			}, "")
			w, task := s.startWorker(t, "srv")
			q := s.waitQuestion(s.Sys.OperatorID(), w)
			for _, want := range []string{"get-sum", "b (number, required)", `{"a":2}`} {
				if !strings.Contains(q.Content, want) {
					t.Errorf("the operator's question lacks %q:\n%s", want, q.Content)
				}
			}
			if strings.Contains(q.Content, "- a (") {
				t.Errorf("the question asks for a, which was given:\n%s", q.Content)
			}
			if tc.decide != nil {
				if err := s.Sys.AnswerApproval(s.Sys.OperatorID(), q.MessageID, *tc.decide); err != nil {
					t.Fatal(err)
				}
			} else {
				reply(s, q, tc.answer)
			}
			s.waitSummary(w, task)
			steps := s.toolSteps(w)
			if len(steps) != 1 || steps[0].ExecutionState != tc.state {
				t.Fatalf("want one %s tool step\n%s", tc.state, s.Dump())
			}
			got := jsonString(steps[0].ExecuteResult["mcp_server_result"]) + " " + jsonString(steps[0].ExecuteResult["error"])
			if !strings.Contains(got, tc.want) {
				t.Errorf("step %s lacks %q", got, tc.want)
			}
		})
	}
}

// TestElicitationHoldsTheCallTimeout: while the operator is asked on a
// server's behalf, the call's timeout does not run: an answer given well
// after the server's timeout still reaches the tool. (The wait below is
// not synchronisation: it only lets the timeout pass; any longer wait
// checks the same.)
func TestElicitationHoldsTheCallTimeout(t *testing.T) {
	// Long enough for the connection's handshake (bounded by the same
	// timeout) on a loaded machine.
	const timeout = 2 * time.Second
	f := newFixture(t, false)
	sc := fixtureConfig(t, f)
	sc.Timeout = downstream.Duration(timeout)
	s := newRequestStack(t, sc, []scripted.Call{{Server: "srv", Tool: "ask-elicitation", Args: map[string]any{}}}, "")
	w, task := s.startWorker(t, "srv")
	q := s.waitQuestion(s.Sys.OperatorID(), w)
	<-time.After(timeout + timeout/2)
	reply(s, q, "Ada")
	s.waitSummary(w, task)
	steps := s.toolSteps(w)
	if len(steps) != 1 || steps[0].ExecutionState != engine.StateFinished {
		t.Fatalf("want one finished tool step (the timeout held while the operator was asked)\n%s", s.Dump())
	}
	if got := jsonString(steps[0].ExecuteResult["mcp_server_result"]); !strings.Contains(got, "accept map[name:Ada]") {
		t.Errorf("result %s lacks the answer", got)
	}
}
