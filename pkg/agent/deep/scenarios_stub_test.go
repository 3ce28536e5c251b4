package deep_test

var summaryScenarios []scenario
