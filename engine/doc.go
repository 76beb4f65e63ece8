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
// # Where the spec lives
//
// State shapes of every section are in state.go. System (system.go) is the
// registry and router: it creates the owners, looks them up by ID, routes
// commands to them, starts and stops them, and where a rule spans owners
// it orders the calls (one owner's lock at a time). A rule about one agent
// is a method of *agent in an agent file (agent*.go; memory.go, receive.go
// and step_lock.go hold agent rules too), a rule about one task a method of
// *task in a task file (task*.go). By spec section:
//
//	section                       System: routing, order        agent           task
//	§1.1 base task, start-up      system.go                                     task.go
//	§1.2 conversation pool        send.go (hand)                                task.go (record)
//	§1.3, §6.1 an agent's loop    sync.go (runStep)             agent.go
//	§2.1, §2.2 tasks, stages      task_manager.go                               task.go (report)
//	§2.3, §9.3 memory                                           memory.go
//	§2.4, §5.7 steps, todo order                                agent_steps.go
//	§2.5 SyncState                sync.go (apply)               agent_apply.go  task.go (report)
//	§3.4–§3.12 skill outputs      output.go, plan.go (§3.12),
//	                              send.go (§3.7),
//	                              task_manager.go (§3.9),
//	                              agent_manager.go (§3.10),
//	                              ask_info.go (§3.11)
//	§4, §8.2 executors, router    executor.go, sync.go (route)
//	§6.2 messages taken                                         receive.go
//	§7 the HumanAgent             human.go, confirm.go          agent_human.go
//	§7.1 visibility               visibility.go                                 task_controls.go
//	§8.3, §8.4 dispatcher         message.go, send.go
//	§9.1 step lock                step_lock.go (engage,         step_lock.go
//	                              release across agents)
//
// Beyond the spec: owner.go (commits, snapshots); restore.go (an agent's
// own recovery in agent_restore.go); supervise.go, endpoint.go and
// tool_outage.go (liveness: the LLM endpoint's outages and refusals, a
// downstream MCP server's outages; the agent's side of an outage in
// agent_controls.go);
// bounds.go (an agent's bound; a task's in task_bounds.go); pause.go and
// interrupt.go (the operator's controls; their agent and task sides in
// agent_controls.go and task_controls.go); budget_tokens.go; trail.go.
// stage_counts.go holds the counts the stage budgets and the
// message-chain limit read, with their own bound.
//
// # Reads
//
// Every read (ask_info, snapshots for MCP resources and the monitor) takes
// the owner's published snapshot, the document as the store holds it: no
// read waits for a store write, an LLM call or a tool call.
package engine
