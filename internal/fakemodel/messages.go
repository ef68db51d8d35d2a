package fakemodel

import "net/http"

// serveMessages serves the Messages API. (Stub: being written.)
func (s *Server) serveMessages(w http.ResponseWriter, r *http.Request) {
	writeError(w, Messages, &APIError{Status: http.StatusNotImplemented, Type: "not_implemented", Message: "not yet"})
}
