package deep_test

var (
	todoScenarios      []scenario
	subagentScenarios  []scenario
	interruptScenarios []scenario
	fileScenarios      []scenario
	summaryScenarios   []scenario
	modelScenarios     []scenario
	limitScenarios     []scenario
	promptScenarios    []scenario
)
