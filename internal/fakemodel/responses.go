package fakemodel

import "net/http"

// serveResponses serves the Responses API. (Stub: being written.)
func (s *Server) serveResponses(w http.ResponseWriter, r *http.Request) {
	writeError(w, Responses, &APIError{Status: http.StatusNotImplemented, Type: "not_implemented", Message: "not yet"})
}
