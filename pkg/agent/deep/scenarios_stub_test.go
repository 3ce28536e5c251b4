package deep_test

var (
	fileScenarios    []scenario
	summaryScenarios []scenario
)
