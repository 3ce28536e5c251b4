package runhost

// TakeoverEvery exposes the takeover loop's interval to the tests.
var TakeoverEvery = takeoverEvery
