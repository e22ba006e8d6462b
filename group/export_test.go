package group

// ListenLocalUDP is listenLocalUDP for the external tests.
var ListenLocalUDP = listenLocalUDP
