package server_test

import (
	"bufio"
	"context"
	"encoding/json"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/mas-mcp/mas-mcp/engine"
	"github.com/mas-mcp/mas-mcp/internal/fakellm"
	"github.com/mas-mcp/mas-mcp/internal/teststack"
)

// TestBrowserControls: the operator's buttons on the monitor page
// (testdata/browser/controls.mjs) pause and resume a task and an agent,
// approve a tool call's question with a note, and interrupt an agent
// during a slow LLM call; after each, the engine is checked here.
func TestBrowserControls(t *testing.T) {
	node, dir := needBrowser(t)
	m := newMonitorEnv(t, envOptions{})
	sys := m.stack.Sys
	op := sys.OperatorID()
	task, question := m.operatorTask(op)
	alice := m.stack.AgentByName("alice")
	const instruction = "INSTRUCTION: write the report in plain text now"

	ctx, cancel := context.WithTimeout(context.Background(), browserTimeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, node, filepath.Join(dir, "controls.mjs"), "--timeout", "80", "--chromium", chromium,
		"--task", task, "--agent", alice, "--instruction", instruction,
		"--screenshot", filepath.Join(t.TempDir(), "controls.png"), m.ts.URL+"/")
	cmd.Dir = dir
	cmd.Env = cleanEnv()
	cmd.WaitDelay = 10 * time.Second
	var stderr teststack.SyncBuffer
	cmd.Stderr = &stderr
	stdin, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatalf("start node controls.mjs: %v", err)
	}
	waited := false
	defer func() {
		if !waited {
			_ = cmd.Process.Kill()
			_ = cmd.Wait()
		}
		if t.Failed() {
			t.Logf("controls.mjs stderr:\n%s", lastLines(stderr.String(), 60))
		}
	}()

	answers := make(chan engine.Answer, 1)
	askCtx, stopAsking := context.WithCancel(context.Background())
	defer stopAsking()
	started := make(chan struct{}, 1)
	interruptShown := make(chan struct{})
	paused := func() bool { a, _ := sys.Agent(alice); return a.Paused }
	var last string
	sc := bufio.NewScanner(stdout)
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		reply := "OK"
		switch line {
		case "TASK_PAUSED":
			if !m.stack.Task(task).Paused {
				t.Error("the page shows the task paused, the engine does not")
			}
		case "TASK_RESUMED":
			if m.stack.Task(task).Paused {
				t.Error("the page shows the task resumed, the engine does not")
			}
		case "AGENT_PAUSED":
			if !paused() {
				t.Error("the page shows alice paused, the engine does not")
			}
		case "AGENT_RESUMED":
			if paused() {
				t.Error("the page shows alice resumed, the engine does not")
			}
		case "ASK":
			go func() {
				a, err := sys.Ask(askCtx, engine.OperatorQuestion{TaskID: task, AgentID: alice, Question: "Approval needed: alice wants to write report.txt", Timeout: time.Minute})
				if err != nil {
					t.Errorf("ask: %v", err)
				}
				answers <- a
			}()
			reply = "ASKED"
		case "APPROVED":
			select {
			case a := <-answers:
				if a.Decision == nil || !a.Decision.Approve || a.Decision.Note != "looks fine" {
					t.Errorf("the approval's answer %+v, want approve with the note", a)
				}
			case <-ctx.Done():
				t.Fatal("the approval question was never answered")
			}
		case "SLOW":
			// alice's next LLM call (after the operator's answer) hangs
			// until it is cancelled.
			m.stack.LLM.Script(fakellm.Rule{Agent: "alice", Func: func(*fakellm.Call) fakellm.Reply {
				started <- struct{}{}
				return fakellm.Reply{Delay: 10 * time.Minute}
			}})
			// Her call with the interrupt's instruction is answered once
			// the page showed the interrupted step: answered at once, her
			// stage could go on and end before the page read the step, and
			// the page would show it only as it last read it, running.
			m.stack.LLM.Script(fakellm.Rule{Agent: "alice", Contains: instruction, Func: func(c *fakellm.Call) fakellm.Reply {
				select {
				case <-interruptShown:
				case <-ctx.Done():
				}
				return m.team.Handle(c)
			}})
			reply2 := "plain text"
			if _, err := sys.HumanSend(op, engine.HumanMessage{TaskID: task, Receiver: []string{alice}, Content: reply2, ReplyTo: question.MessageID}); err != nil {
				t.Fatal(err)
			}
			select {
			case <-started:
			case <-ctx.Done():
				t.Fatal("alice's LLM call never started")
			}
			reply = "RUNNING"
		case "INTERRUPTED":
			close(interruptShown)
			// The page showed the step interrupted (its error, from the
			// engine); the instruction became alice's next step: her LLM
			// was asked with it. (Her steps themselves may be cleared by
			// now, the stage having gone on.)
			m.stack.WaitFor("alice's LLM call with the instruction", func() bool {
				for _, c := range m.stack.LLM.CallsFor(engine.SkillProcessMessage, alice) {
					if strings.Contains(c.Prompt, instruction) {
						return true
					}
				}
				return false
			})
		default:
			last = line
			continue
		}
		if _, err := stdin.Write([]byte(reply + "\n")); err != nil {
			t.Fatal(err)
		}
	}
	_ = stdin.Close()
	err = cmd.Wait()
	waited = true
	if err != nil {
		t.Fatalf("controls.mjs failed: %v", err)
	}
	var rep struct {
		OK bool `json:"ok"`
	}
	if err := json.Unmarshal([]byte(last), &rep); err != nil || !rep.OK {
		t.Fatalf("controls.mjs report %q: %v", last, err)
	}
}
