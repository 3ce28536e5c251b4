package deep_test

var (
	fileScenarios      []scenario
	summaryScenarios   []scenario
	modelScenarios     []scenario
	limitScenarios     []scenario
	promptScenarios    []scenario
)
