package engine

import (
	"context"
	"testing"
	"time"
)

// TestAgentWaitingOnAnApprovalShowsWaiting: a step of alice's asks the
// operator (the risk gate's approval, a downstream server's elicitation, a
// form for missing arguments: System.Ask) and blocks until the answer.
// Meanwhile alice shows working_state "waiting", waiting on the operator,
// with what she waits for, as a call waiting out an LLM outage or a budget
// hold does; only the asked operator reads what (the question is private
// to it). Once answered she shows working again.
func TestAgentWaitingOnAnApprovalShowsWaiting(t *testing.T) {
	b := newTestbed(t, nil)
	alice := b.newAgent("alice")
	id := b.newTask("deploy", alice)
	bea := b.operator("bea")
	if _, err := b.sys.ShareTask(b.op(), id, bea); err != nil {
		t.Fatal(err)
	}
	asked := make(chan struct{})
	b.sc.onAgent("alice", SkillPlanning, plan(spec(SkillThink, "needs approval")))
	b.sc.onText("needs approval", func(ctx context.Context, in *ExecInput) *Output {
		close(asked)
		a, err := in.Operator.Ask(ctx, OperatorQuestion{TaskID: in.Step.TaskID, StageID: in.Step.StageID, AgentID: in.Agent.AgentID,
			Question: "Approval needed: may alice call deploy.run?", Timeout: time.Hour})
		if err != nil {
			return &Output{Err: err}
		}
		return &Output{Result: map[string]any{"answer": a.Text}}
	})
	b.addStages(id, StageSpec{StageIntention: "ship", AgentAllocation: map[string]string{alice: "deploy"}})
	<-asked
	b.waitFor("the approval question in the inbox", func() bool { return len(awaitingIn(b, id)) == 1 })
	q := awaitingIn(b, id)[0]
	a, _ := b.sys.AgentFor(b.op(), alice)
	if a.WorkingState != WorkingWaiting || a.WaitingOn != WaitingOnOperator || a.WaitingIn != id || a.WaitingFor == "" {
		t.Errorf("while alice's step waits on the operator's approval: working_state %q, waiting_for %q, waiting_on %q, waiting_in %q; "+
			"want %q on %q in %s", a.WorkingState, a.WaitingFor, a.WaitingOn, a.WaitingIn, WorkingWaiting, WaitingOnOperator, id)
	}
	if other, _ := b.sys.AgentFor(bea, alice); other.WaitingFor != "" || other.WaitingOn != "" {
		t.Errorf("operator bea, who shares the task but was not asked, reads alice waiting for %q on %q", other.WaitingFor, other.WaitingOn)
	}

	if err := b.sys.AnswerApproval(b.op(), q.MessageID, Decision{Approve: true}); err != nil {
		t.Fatal(err)
	}
	b.waitFor("alice's step to take the answer", func() bool {
		return len(b.steps(alice, func(s StepState) bool { return s.TextContent == "needs approval" && s.ExecutionState == StateFinished })) == 1
	})
	if a := b.agent(alice); a.WaitingFor != "" || a.WaitingOn != "" {
		t.Errorf("after the answer alice still reads waiting for %q on %q", a.WaitingFor, a.WaitingOn)
	}
}
