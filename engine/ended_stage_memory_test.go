package engine

import (
	"context"
	"testing"
	"testing/synctest"
)

// TestEndedStageStaysOutOfWorkingMemory: working memory holds an agent's
// unfinished stages (spec §2.4.1), and finish_stage drops the stage from
// it. A message taken in the stage afterwards (stage_relative names any
// stage of the task) is still processed, but neither it nor the steps its
// processing plans put the stage back, nor does the operator's record of
// sending it in the operator's working memory: otherwise every late word in an
// ended stage would grow working memory again, bounded only by the
// agent document's size bound.
func TestEndedStageStaysOutOfWorkingMemory(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b := bubbleBed(t, nil)
		w := b.newAgent("w")
		task := b.newTask("t", w)
		b.sc.onAgent("w", SkillProcessMessage, func(context.Context, *ExecInput) *Output {
			return &Output{AddSteps: []StepSpec{spec(SkillThink, "mull the late word over")}}
		})
		stages := b.addStages(task,
			StageSpec{StageIntention: "first", AgentAllocation: map[string]string{w: "work"}},
			StageSpec{StageIntention: "second", AgentAllocation: map[string]string{w: "work"}})
		synctest.Wait()
		if _, err := b.sys.TaskInstruction(b.op(), TaskInstruction{Action: ActionFinishStage, TaskID: task, StageID: stages[0]}); err != nil {
			t.Fatal(err)
		}
		synctest.Wait()
		ended := stages[0]
		if _, in := b.agent(w).WorkingMemory[task][ended]; in {
			t.Fatalf("working memory %v still holds stage %s after finish_stage: not the case meant", b.agent(w).WorkingMemory, ended)
		}
		const late = 3
		for range late {
			if _, err := b.sys.HumanSend(b.op(), HumanMessage{TaskID: task, Receiver: []string{w}, StageRelative: ended, Content: "a late word"}); err != nil {
				t.Fatal(err)
			}
			synctest.Wait()
		}
		thought := b.steps(w, func(s StepState) bool {
			return s.StageID == ended && s.Executor == SkillThink && stateEnded(s.ExecutionState)
		})
		if len(thought) != late {
			t.Fatalf("w thought over %d late words in the ended stage, want %d: the messages are taken and processed\n%s", len(thought), late, b.dump())
		}
		if ids, in := b.agent(w).WorkingMemory[task][ended]; in {
			t.Errorf("after %d messages in ended stage %s, w's working memory holds it again with %d step IDs: %v", late, ended, len(ids), b.agent(w).WorkingMemory[task])
		}
		if ids, in := b.agent(b.op()).WorkingMemory[task][ended]; in {
			t.Errorf("the operator's working memory holds ended stage %s again, with the %d messages it sent there: %v", ended, len(ids), b.agent(b.op()).WorkingMemory[task])
		}
		if _, in := b.agent(w).WorkingMemory[task][stages[1]]; !in {
			t.Errorf("w's working memory %v lacks stage %s, which runs", b.agent(w).WorkingMemory[task], stages[1])
		}
	})
}
