// Package engine is the multi-agent system (MAS) of the spec
// (../shared/spec/000_c9bd28e1fda30e56.txt): tasks split into sequential
// stages, agents that plan and run their own steps, messages between agents
// with a step lock while a sender waits, persistent memory, and the operator's
// HumanAgent.
//
// # Ownership
//
// Each task (its stages, shared info pool and conversation log) and each
// agent (its steps, memories and step lock) has exactly one owner: a struct
// whose every mutation happens under its single writer's lock, ownerMu
// (owner.go). No code path ever holds two owners' locks at once; effects on
// another owner (a message, a stage update) are applied after the first lock
// is released. This is the spec's SyncState (§2.5) and Message Dispatcher
// (§8.4) made safe. Nothing under an owner's lock does I/O: releasing it
// writes the owner's document to the store, then publishes it to readers
// and announces the change (durable before visible).
//
// # Agents
//
// One goroutine per LLM agent runs its steps in todo order, one at a time
// (§1.3.2). It blocks on a wake signal when it has nothing to do or its step
// lock is engaged; nothing polls. An executor (a skill, or the tool executor)
// gets an immutable view of the agent and returns a typed Output; the agent's
// goroutine then applies the Output (§2.5's table) through the owners.
//
// # Reads
//
// Every read (ask_info, snapshots for MCP resources and the monitor) takes
// the owner's published snapshot, the document as the store holds it: no
// read waits for a store write, an LLM call or a tool call.
package engine
