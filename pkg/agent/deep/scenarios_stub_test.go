package deep_test

var (
	interruptScenarios []scenario
	fileScenarios      []scenario
	summaryScenarios   []scenario
	modelScenarios     []scenario
	limitScenarios     []scenario
	promptScenarios    []scenario
)
