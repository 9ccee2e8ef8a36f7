"""Every key the config schema accepts either takes effect or is refused by `ssekd check`.

The walk enumerates every key of the composed schema (the same walk that writes
docs/config-reference.md) and fails when a key has no entry in `COVERAGE`, when an entry names a
key the schema no longer has, or when it names a test that does not exist. A new key therefore
fails here until a behaviour test (it takes effect) or a refusal test (`ssekd check` says why it
cannot be used, with file and line) is written and listed. The keys of a guard entry are all
shown by the guarded end-to-end test (`JWT`).
"""

from __future__ import annotations

import ast
import re
from collections.abc import Iterator
from functools import cache
from pathlib import Path

from ssekd.config.reference import _generic_binding, rows, ssekd_types
from ssekd.config.schema import schema_files
from ssekd.spi.plugins import discover

TESTS = Path(__file__).resolve().parents[1]
#: The guard and its use by http and sse-kafka: the end-to-end test that runs a guarded daemon
#: with every one of these keys (issuer, audience, JWKS keys, challenge, credentials, guarded).
JWT = "e2e/test_jwt_guard.py::test_no_token_401_good_token_streams_missing_role_404"

REFUSED = "config/test_refused_keys.py::test_check_refuses_with_file_line_and_message"
#: Zilla's echo examples on the daemon (tcp.echo, tls.echo, http.proxy.jwt, http.metrics).
ECHO_EXAMPLES = "e2e/zilla_examples/test_echo_and_metrics.py"
TLS_ECHO = f"{ECHO_EXAMPLES}::test_tls_echo_as_test_sh_does"
SITE = "bindings/filesystem/test_static_files.py::test_index_etag_304_and_head"
CORS = "bindings/http/test_http_server.py::test_cross_origin_preflight_and_response"
TLS = "bindings/tls/test_tls_server.py"
TELEMETRY = "telemetry/test_exporter.py::test_telemetry_metrics_attributes_and_per_binding_selection"
SIGNERS = "bindings/tls/test_tls_server.py::test_tls_signers_serve_the_keys_they_issued"
SASL = "bindings/kafka/test_security_settings.py::test_kafka_sasl_reaches_librdkafka"
FILTERS = "bindings/sse_kafka/test_routes_filters.py"
#: ssekd's additions to sse and sse-kafka (issue 29), and the test that each gzip setting
#: reaches the sse server.
ADDITIONS = "config/test_sse_kafka_additions.py"
COMPRESSION_SETTINGS = "test_compression_settings_reach_the_sse_server"
OTLP = "telemetry/test_otlp.py::test_receiver_gets_stream_metrics_and_events_as_log_records"
OTLP_DOWN = "telemetry/test_otlp.py::" \
            "test_collector_down_streaming_goes_on_one_failure_event_per_interval"
OTLP_SIGNALS = "telemetry/test_otlp.py::" \
               "test_signals_and_per_signal_paths_and_a_reload_that_changes_them"
H2 = "reliability/test_h2_limits.py"
LIMITS = "reliability/test_connections.py::test_connections_over_the_limits_are_closed_at_once"
PROXY = "e2e/test_proxy_protocol.py::test_a_trusted_balancer_names_the_clients_and_no_one_else_can"
#: The sse client and the http/tcp/tls clients it reaches its upstream through.
RELAY = "bindings/sse/test_sse_client.py::test_500_streams_get_every_event_once_over_one_upstream_stream"
UPSTREAMS = "bindings/sse/test_sse_client_upstreams.py"
BAD_UPSTREAMS = f"{UPSTREAMS}::test_bad_upstreams_are_events_and_bounded_retries_while_a_good_one_streams_on"
HTTPS_UPSTREAM = f"{UPSTREAMS}::test_https_upstream_needs_a_trusted_certificate_for_the_name"
#: The sse client's `requests`, as the asyncapi client of Zilla's asyncapi.sse.proxy composes
#: them: the events a payload schema refuses are dropped, the rest relayed in order.
SSE_SPEC_RELAY = "e2e/zilla_examples/test_asyncapi_sse_proxy.py::" \
                 "test_many_events_good_and_bad_mixed_arrive_in_order_none_lost"
STREAMS = "reliability/test_slow_clients.py::" \
          "test_on_the_wire_streams_beyond_the_limit_retry_and_silent_streams_are_reset"

#: The http server's `options.requests` and the http client's `responses` (validation/).
REQUESTS = "bindings/http/test_request_validation.py::" \
           "test_a_request_its_entry_refuses_is_400_saying_why"
RESPONSES = "bindings/http/test_validation.py::" \
            "test_responses_are_selected_by_status_and_content_type_the_last_wins"
MODELS = "e2e/test_models.py::test_json_model_every_stream_gets_the_valid_900_and_resumes_exactly"
AVRO = "e2e/test_models_browser.py::test_avro_from_registry_arrives_in_the_browser_as_json"
REGISTRY_DOWN = "e2e/test_models.py::test_registry_down_at_start_refuses_streams_for_now_then_recovers"
CATALOG_ERRORS = "catalogs/test_catalog_config.py::" \
                 "test_bad_catalogs_and_models_are_config_errors_with_file_and_line"
CATALOG_UNITS = "catalogs/test_models.py::test_catalog_options_from_the_config"
KEY_MODEL = "catalogs/test_models.py::test_key_model_checks_keys_and_leaves_them_as_they_are"
TTL = "catalogs/test_models.py::test_unknown_id_is_invalid_and_latest_follows_after_cache_ttl"
WRITE_AVRO = "e2e/zilla_examples/test_http_kafka_models.py::" \
             "test_avro_test_sh_register_post_then_get_and_an_invalid_body_is_not_found"
WRITE_PROTO = "e2e/zilla_examples/test_http_kafka_models.py::" \
              "test_proto_test_sh_a_valid_body_is_204_and_an_unknown_field_is_400"
WRITE_KEY = "catalogs/test_writing.py::test_keys_and_values_refused_or_pending_say_so"

#: The asyncapi kinds: Zilla's example on the real daemon, the guarded variant, and the
#: composition tests for what the example does not use.
AAPI = "e2e/test_asyncapi_example.py::test_zilla_example_streams_the_topic_as_its_own_test_expects"
AAPI_GUARDED = "e2e/test_asyncapi_example.py::" \
               "test_guarded_variant_streams_each_user_their_records_and_checks_scopes"
AAPI_COMPOSE = "bindings/asyncapi/test_compose.py"
AAPI_VERSION = "bindings/asyncapi/test_registry_specs.py::" \
               "test_specs_from_a_registry_by_subject_and_version"
AAPI_PROXY_ROUTES = f"{AAPI_COMPOSE}::test_routes_take_operations_by_glob_and_tag"
AAPI_SERVER_ROUTES = f"{AAPI_COMPOSE}::test_server_routes_send_operations_to_their_exits"
AAPI_TLS = "e2e/test_asyncapi_example.py::" \
           "test_an_https_server_of_the_spec_is_served_over_tls_with_the_vault_s_key"
AAPI_PATHNAME = f"{AAPI_COMPOSE}::test_a_server_pathname_is_in_front_of_every_path"
#: The openapi kinds and the openapi-asyncapi proxy: Zilla's two examples on the real daemon, and
#: the composition tests for what the examples do not use.
OAPI_COMPOSE = "bindings/openapi/test_compose.py"
OAPI_PROXY = "e2e/zilla_examples/test_openapi_proxy.py::" \
             "test_get_pets_answers_the_mockers_pets_as_test_sh_does"
OAPI_KAFKA = "e2e/zilla_examples/test_openapi_asyncapi.py::" \
             "test_a_posted_pet_is_listed_as_test_sh_does"
OAPI_ROUTES = f"{OAPI_COMPOSE}::test_routes_take_operations_by_id_glob_and_tag"
OAPI_CLIENT = f"{OAPI_COMPOSE}::" \
              "test_the_proxy_example_composes_a_server_and_a_client_to_the_named_upstream"
OAPI_SECURITY = f"{OAPI_COMPOSE}::test_security_requires_the_mapped_guard_with_the_scopes_as_roles"
#: The write path's security tests on a real daemon.
AUDIT = "bindings/http_kafka/test_write_path_audit.py"
#: The write path (http-kafka) and the kafka client's producers.
WRITES = "bindings/http_kafka/test_write_path.py"
WRITE_OPTIONS = "bindings/http_kafka/test_options.py::" \
                "test_other_header_names_acks_window_and_patch_merge"
WRITE_CONFIG = "bindings/http_kafka/test_config.py"
PRODUCER = "bindings/kafka/test_producer.py"
#: The quic binding (HTTP/3), on a memory reactor with real aioquic clients.
QUIC_CONFIG = "bindings/quic/test_config.py"
QUIC_OPTIONS = f"{QUIC_CONFIG}::test_the_options_reach_the_server"
QUIC_LIMITS = "bindings/quic/test_limits.py"
ALT_SVC = f"{QUIC_CONFIG}::test_alt_svc_is_sent_when_configured_and_only_then"

COVERAGE: dict[str, str] = {
    "name": "telemetry/test_events.py::test_a_config_error_at_start_is_an_event",
    "vaults": f"{TLS}::test_seed_config_sni_and_alpn",
    "guards": JWT,
    "catalogs": MODELS,
    "bindings": SITE,
    "telemetry": "telemetry/test_prometheus_server.py::"
                 "test_fifty_streams_counted_then_gone_and_bytes_match",
    "bindings.*.type": SITE,
    "bindings.*.kind": SITE,
    "bindings.*.options": SITE,
    "bindings.*.telemetry": TELEMETRY,
    "bindings.*.telemetry.metrics": TELEMETRY,
    "bindings.*.telemetry.attributes": ECHO_EXAMPLES + "::"
    "test_http_metrics_labels_each_series_with_the_request_attributes",
    "bindings.*.vault": f"{TLS}::test_seed_config_sni_and_alpn",
    "bindings.*.exit": SITE,
    "bindings.*.routes": "bindings/http/test_http_server.py::test_unmatched_authority_is_404",
    "bindings.*.routes[].when": "bindings/http/test_http_server.py::test_unmatched_authority_is_404",
    "bindings.*.routes[].guarded": JWT,
    "bindings.*.routes[].exit": f"{TLS}::test_routes_by_alpn_and_authority",
    "bindings.*.routes[].with": SITE,
    "bindings.tcp/server.options.host": SITE,
    "bindings.tcp/server.options.limits": LIMITS,
    "bindings.tcp/server.options.limits.connections": LIMITS,
    "bindings.tcp/server.options.limits.connections-per-ip": LIMITS,
    "bindings.tcp/server.options.proxy-protocol": PROXY,
    "bindings.tcp/server.options.proxy-protocol.from": PROXY,
    "bindings.tcp/server.options.proxy-protocol.timeout":
        "bindings/test_proxy_protocol.py::"
        "test_a_trusted_address_that_sends_nothing_is_closed_after_the_timeout",
    "bindings.tcp/server.options.port": SITE,
    "bindings.tcp/server.routes[].when[].port": f"{TLS}::test_curl_http2_and_http11_over_tls_and_h2c",
    "bindings.tcp/server.routes[].when[].cidr": "bindings/test_tcp.py::test_tcp_route_by_cidr",
    "bindings.tcp/server.routes[].when[].authority": f"{REFUSED}[tcp-authority]",
    "bindings.tcp/client.options.host": RELAY,
    "bindings.tcp/client.options.port": RELAY,
    "bindings.tcp/client.routes[].when[].port": f"{REFUSED}[tcp-client-routes]",
    "bindings.tcp/client.routes[].when[].cidr": f"{REFUSED}[tcp-client-routes]",
    "bindings.tcp/client.routes[].when[].authority": f"{REFUSED}[tcp-client-routes]",
    "bindings.http/server.options.versions": f"{TLS}::test_versions_limit_what_is_negotiated",
    "bindings.http/server.options.access-control": CORS,
    "bindings.http/server.options.access-control.policy": CORS,
    "bindings.http/server.options.access-control.allow": CORS,
    "bindings.http/server.options.access-control.allow.origins": CORS,
    "bindings.http/server.options.access-control.allow.methods":
        "bindings/http/test_cors.py::test_cors_allow_methods_and_headers_replace_the_echo",
    "bindings.http/server.options.access-control.allow.headers":
        "bindings/http/test_cors.py::test_cors_allow_methods_and_headers_replace_the_echo",
    "bindings.http/server.options.access-control.allow.credentials": CORS,
    "bindings.http/server.options.access-control.max-age": CORS,
    "bindings.http/server.options.access-control.expose": CORS,
    "bindings.http/server.options.access-control.expose.headers": CORS,
    "bindings.http/server.options.authorization": JWT,
    "bindings.http/server.options.authorization.<name>.credentials": JWT,
    "bindings.http/server.options.authorization.<name>.credentials.headers": JWT,
    "bindings.http/server.options.authorization.<name>.credentials.query": JWT,
    "bindings.http/server.options.authorization.<name>.credentials.cookies": JWT,
    "bindings.http/server.options.limits": "bindings/http/test_http_server.py::test_slowloris_is_cut_off",
    "bindings.http/server.options.limits.header-bytes":
        f"{H2}::test_a_header_block_over_header_bytes_ends_the_connection",
    "bindings.http/server.options.limits.header-count":
        f"{H2}::test_more_headers_than_header_count_is_431_on_that_stream",
    "bindings.http/server.options.limits.header-timeout":
        "bindings/http/test_http_server.py::test_slowloris_is_cut_off",
    "bindings.http/server.options.limits.idle-timeout":
        "bindings/http/test_h2c.py::test_silent_connection_is_closed_after_the_site_timeout",
    "bindings.http/server.options.limits.body-bytes":
        "reliability/test_request_bodies.py::test_h1_chunked_body_is_413_the_moment_it_crosses_the_limit",
    "bindings.http/server.options.limits.body-timeout":
        "reliability/test_body_deadline.py::test_a_trickled_body_gets_408_at_the_deadline",
    "bindings.http/server.options.limits.h2-streams":
        f"{H2}::test_the_daemon_advertises_its_configured_limits",
    "bindings.http/server.options.limits.h2-resets":
        "reliability/test_h2_rapid_reset.py::test_more_resets_than_the_limit_in_ten_seconds_get_goaway",
    "bindings.http/server.options.limits.h2-control-frames":
        "reliability/test_h2_abuse.py::test_more_frames_to_answer_than_the_limit_get_goaway",
    "bindings.http/server.options.limits.h2-unsent-bytes":
        "reliability/test_unread_answers.py::"
        "test_h2_streams_whose_window_never_opens_cost_at_most_the_connection_bound",
    "bindings.http/server.options.limits.process-unsent-bytes":
        "reliability/test_unread_answers.py::"
        "test_http11_clients_that_never_read_cost_at_most_the_process_bound",
    "bindings.http/server.options.limits.h3-unsent-bytes":
        "bindings/quic/test_h3.py::"
        "test_a_client_that_acknowledges_nothing_gets_its_producers_paused_and_big_answers_503",
    "bindings.http/server.options.alt-svc": ALT_SVC,
    "bindings.http/server.options.alt-svc.h3": ALT_SVC,
    "bindings.http/server.options.alt-svc.max-age": ALT_SVC,
    "bindings.http/server.routes[].when[].headers":
        "bindings/http/test_http_server.py::test_unmatched_authority_is_404",
    "bindings.tls/server.options.keys": f"{TLS}::test_sni_picks_the_key_unknown_names_get_the_first",
    "bindings.tls/server.options.trust": f"{TLS}::test_mutual_required",
    "bindings.tls/server.options.signers": SIGNERS,
    "bindings.tls/server.options.trustcacerts":
        "config/test_refused_keys.py::test_trustcacerts_true_is_refused_false_is_what_happens",
    "bindings.tls/server.options.sni": f"{TLS}::test_sni_list_limits_the_names_that_choose",
    "bindings.tls/server.options.alpn": f"{TLS}::test_curl_http2_and_http11_over_tls_and_h2c",
    "bindings.tls/server.options.mutual": f"{TLS}::test_mutual_requested_serves_without_a_certificate",
    "bindings.tls/server.routes[].when[].authority": f"{TLS}::test_routes_by_alpn_and_authority",
    "bindings.tls/server.routes[].when[].alpn": f"{TLS}::test_routes_by_alpn_and_authority",
    # Zilla's tls.echo: client certificates to the x509 guard, its roles on the routes
    "bindings.tls/server.options.authorization": TLS_ECHO,
    "bindings.tls/server.options.authorization.<name>.credentials": TLS_ECHO,
    "bindings.tls/server.options.authorization.<name>.credentials.certificates": TLS_ECHO,
    "bindings.quic/server.options.host": QUIC_OPTIONS,
    "bindings.quic/server.options.port": QUIC_OPTIONS,
    "bindings.quic/server.options.keys":
        f"{QUIC_CONFIG}::test_the_server_name_picks_the_key_and_unknown_names_get_the_first",
    "bindings.quic/server.options.sni": f"{QUIC_CONFIG}::test_the_sni_list_limits_the_names_that_choose",
    "bindings.quic/server.options.alpn": f"{QUIC_CONFIG}::test_configs_refused_at_their_path[alpn-h2]",
    "bindings.quic/server.options.retry": QUIC_OPTIONS,
    "bindings.quic/server.options.limits": QUIC_OPTIONS,
    "bindings.quic/server.options.limits.connections":
        f"{QUIC_LIMITS}::test_connections_refuse_past_the_servers_limit_until_one_closes",
    "bindings.quic/server.options.limits.connections-per-ip":
        f"{QUIC_LIMITS}::test_connections_per_ip_refuse_until_one_closes",
    "bindings.quic/server.options.limits.streams":
        f"{QUIC_LIMITS}::test_a_connection_has_as_many_requests_open_as_streams_allows",
    "bindings.quic/server.options.limits.idle-timeout":
        f"{QUIC_LIMITS}::test_a_silent_connection_ends_after_the_idle_timeout",
    "bindings.quic/server.options.limits.handshake-timeout":
        f"{QUIC_LIMITS}::test_a_handshake_not_done_in_time_ends_at_the_deadline",
    "bindings.quic/server.routes[].when[].authority":
        f"{QUIC_CONFIG}::test_routes_by_authority_pick_the_exit",
    "bindings.echo/server.options": f"{ECHO_EXAMPLES}::test_tcp_echo_as_test_sh_does",
    "bindings.http-filesystem/proxy.options": f"{REFUSED}[http-filesystem-options]",
    "bindings.http-filesystem/proxy.routes[].when[].path": SITE,
    "bindings.http-filesystem/proxy.routes[].with.path": SITE,
    "bindings.sse/server.options.limits": STREAMS,
    "bindings.sse/server.options.limits.streams": STREAMS,
    "bindings.sse/server.options.limits.max-lag":
        "reliability/test_slow_clients.py::"
        "test_a_stream_paused_for_max_lag_is_reset_and_one_that_resumes_is_not",
    "bindings.sse/client.options.retry": BAD_UPSTREAMS,
    "bindings.sse/client.options.requests": SSE_SPEC_RELAY,
    "bindings.sse/client.options.requests[].path": SSE_SPEC_RELAY,
    "bindings.sse/client.options.requests[].content": SSE_SPEC_RELAY,
    "bindings.sse/client.options.requests[].content.model": SSE_SPEC_RELAY,
    "bindings.sse/client.options.requests[].content.catalog":
        f"{REFUSED}[sse-client-requests-json-without-catalog]",
    "bindings.sse/client.options.history":
        "bindings/sse/test_sse_client.py::test_a_stream_reconnecting_with_an_id_resumes_from_the_ring",
    "bindings.sse/client.options.history-bytes": BAD_UPSTREAMS,
    "bindings.sse/client.options.idle-timeout": BAD_UPSTREAMS,
    "bindings.sse/client.options.max-upstreams": BAD_UPSTREAMS,
    "bindings.sse/client.routes[].when[].path": f"{UPSTREAMS}::test_a_path_no_route_matches_is_404",
    "bindings.sse/client.routes[].with.query":
        f"{UPSTREAMS}::test_tokens_and_made_up_parameters_stay_at_the_relay_and_dot_paths_never_"
        "leave_it",
    "bindings.http/client.options.versions":
        "e2e/zilla_examples/test_http_proxy.py::test_http_proxy_speaks_http11_upstream_with_versions_http11",
    "bindings.http/client.options.overrides": BAD_UPSTREAMS,
    "bindings.http/server.options.requests": REQUESTS,
    "bindings.http/server.options.requests[].path": REQUESTS,
    "bindings.http/server.options.requests[].method": REQUESTS,
    "bindings.http/server.options.requests[].content-type": REQUESTS,
    "bindings.http/server.options.requests[].headers": REQUESTS,
    "bindings.http/server.options.requests[].params": REQUESTS,
    "bindings.http/server.options.requests[].params.path": REQUESTS,
    "bindings.http/server.options.requests[].params.query": REQUESTS,
    "bindings.http/server.options.requests[].content": REQUESTS,
    "bindings.http/server.options.requests[].responses": REQUESTS,
    "bindings.http/server.options.requests[].responses[].status": REQUESTS,
    "bindings.http/server.options.requests[].responses[].content-type": REQUESTS,
    "bindings.http/server.options.requests[].responses[].headers": REQUESTS,
    "bindings.http/server.options.requests[].responses[].content": REQUESTS,
    "bindings.http/client.options.requests": RESPONSES,
    "bindings.http/client.options.requests[].path": RESPONSES,
    "bindings.http/client.options.requests[].method": RESPONSES,
    "bindings.http/client.options.requests[].content-type": RESPONSES,
    "bindings.http/client.options.requests[].headers": RESPONSES,
    "bindings.http/client.options.requests[].params": RESPONSES,
    "bindings.http/client.options.requests[].params.path": RESPONSES,
    "bindings.http/client.options.requests[].params.query": RESPONSES,
    "bindings.http/client.options.requests[].content": RESPONSES,
    "bindings.http/client.options.requests[].responses": RESPONSES,
    "bindings.http/client.options.requests[].responses[].status": RESPONSES,
    "bindings.http/client.options.requests[].responses[].content-type": RESPONSES,
    "bindings.http/client.options.requests[].responses[].headers": RESPONSES,
    "bindings.http/client.options.requests[].responses[].content": RESPONSES,
    "bindings.tls/client.options.trust": HTTPS_UPSTREAM,
    "bindings.tls/client.options.trustcacerts": HTTPS_UPSTREAM,
    "bindings.tls/client.options.sni": HTTPS_UPSTREAM,
    "bindings.tls/client.options.alpn": HTTPS_UPSTREAM,
    "bindings.sse/server.options.retry": "e2e/test_lifecycle.py::test_keepalive_and_retry",
    "bindings.sse/server.options.max-idle-time": "e2e/test_lifecycle.py::test_keepalive_and_retry",
    "bindings.sse/server.options.compression":
        "e2e/test_compression.py::test_gzip_where_asked_flushed_per_batch",
    "bindings.sse/server.options.compression.level": f"{ADDITIONS}::{COMPRESSION_SETTINGS}",
    "bindings.sse/server.options.compression.window-bits": f"{ADDITIONS}::{COMPRESSION_SETTINGS}",
    "bindings.sse/server.options.compression.memory-level":
        f"{ADDITIONS}::{COMPRESSION_SETTINGS}",
    "bindings.sse/server.options.compression.context": "e2e/test_compression.py::"
        "test_context_event_sends_each_event_alone_and_decodes_to_exactly_the_events",
    "bindings.sse/server.routes[].when[].path":
        "bindings/sse/test_sse_server.py::"
        "test_routes_pick_the_exit_by_path_then_the_binding_exit_then_404",
    "bindings.sse-kafka/proxy.options.internal-topics":
        "reliability/test_topics.py::test_a_route_that_names_an_internal_topic_literally_serves_it",
    "bindings.sse-kafka/proxy.routes[].when[].path": f"{FILTERS}::test_filter_by_key_from_path_params",
    "bindings.sse-kafka/proxy.routes[].with.topic": f"{FILTERS}::test_filter_by_key_from_path_params",
    "bindings.sse-kafka/proxy.routes[].with.filters": f"{FILTERS}::test_filters_are_any_of",
    "bindings.sse-kafka/proxy.routes[].with.filters[].key":
        f"{FILTERS}::test_filter_by_key_from_path_params",
    "bindings.sse-kafka/proxy.routes[].with.filters[].headers": f"{FILTERS}::test_filter_by_header",
    "bindings.sse-kafka/proxy.routes[].with.filters[].value":
        "bindings/sse_kafka/test_value_and_request_filters.py::"
        "test_value_filters_take_the_records_whose_fields_match",
    "bindings.sse-kafka/proxy.routes[].with.compress":
        "e2e/test_compression.py::test_gzip_where_asked_flushed_per_batch",
    "bindings.sse-kafka/proxy.routes[].with.event":
        "bindings/sse_kafka/test_event_ids.py::test_resume_with_key_form_id",
    "bindings.sse-kafka/proxy.routes[].with.event.id":
        "bindings/sse_kafka/test_event_ids.py::test_resume_with_key_form_id",
    "bindings.sse-kafka/proxy.routes[].with.event.caught-up":
        "bindings/sse_kafka/test_caught_up_curl.py::"
        "test_curl_sees_the_signal_after_the_history_then_live_records",
    "bindings.sse-kafka/proxy.routes[].with.event.topic":
        "bindings/sse_kafka/test_topics_stream.py::test_the_field_form_and_filters_per_topic",
    "bindings.filesystem/server.options.location": SITE,
    "bindings.filesystem/server.options.symlinks":
        "bindings/filesystem/test_static_files.py::test_filesystem_symlinks_follow",
    "bindings.filesystem/server.options.dotfiles":
        "bindings/filesystem/test_static_files.py::"
        "test_dotfiles_allow_serves_them_and_nothing_else_changes",
    "bindings.kafka/cache_server.options.bootstrap":
        "telemetry/test_kafka_metrics.py::test_bootstrap_topics_are_cached_before_any_stream",
    "bindings.kafka/cache_server.options.topics": f"{FILTERS}::test_live_topic_starts_at_the_end",
    "bindings.kafka/cache_server.options.topics[].name":
        f"{FILTERS}::test_live_topic_starts_at_the_end",
    "bindings.kafka/cache_server.options.topics[].defaultOffset":
        f"{FILTERS}::test_live_topic_starts_at_the_end",
    "bindings.kafka/cache_server.options.partition-wait":
        "reliability/test_leaderless_partition.py::"
        "test_a_stream_does_not_wait_for_a_partition_without_a_leader",
    "bindings.kafka/cache_server.options.max-topics":
        "bindings/kafka/test_cache.py::test_a_new_topic_beyond_max_topics_is_refused",
    "bindings.kafka/cache_server.options.idle-timeout":
        "reliability/test_topics.py::test_a_topic_without_streams_for_idle_timeout_is_dropped_and_unassigned",
    "bindings.kafka/cache_server.options.missing-topic-retries":
        "reliability/test_topics.py::test_a_missing_topic_is_looked_for_less_and_less_often_then_given_up",
    "bindings.kafka/cache_server.options.catch-up-bytes":
        "reliability/test_slow_clients.py::test_catch_up_delivers_everything_in_steps_of_catch_up_bytes",
    "bindings.kafka/cache_server.options.cache":
        "bindings/sse_kafka/test_resume.py::test_tiny_cache_resume_reads_kafka",
    "bindings.kafka/cache_server.options.cache.max-messages":
        "bindings/sse_kafka/test_resume.py::test_tiny_cache_resume_reads_kafka",
    "bindings.kafka/cache_server.options.cache.max-bytes":
        "bindings/kafka/test_topic_log.py::test_topic_log_bytes_and_age",
    "bindings.kafka/cache_server.options.cache.max-age":
        "bindings/kafka/test_topic_log.py::test_topic_log_bytes_and_age",
    "bindings.http-kafka/proxy.options.idempotency": WRITE_OPTIONS,
    "bindings.http-kafka/proxy.options.idempotency.header": WRITE_OPTIONS,
    "bindings.http-kafka/proxy.options.idempotency.window": WRITE_OPTIONS,
    "bindings.http-kafka/proxy.options.correlation": WRITE_OPTIONS,
    "bindings.http-kafka/proxy.options.correlation.headers": WRITE_OPTIONS,
    "bindings.http-kafka/proxy.options.correlation.headers.reply-to": WRITE_OPTIONS,
    "bindings.http-kafka/proxy.options.correlation.headers.correlation-id": WRITE_OPTIONS,
    "bindings.http-kafka/proxy.options.max-wait":
        f"{WRITES}::test_no_reply_in_time_is_504_and_a_repeat_gets_the_reply_when_it_comes",
    "bindings.http-kafka/proxy.options.ack-timeout":
        "reliability/test_write_faults.py::"
        "test_broker_frozen_during_a_post_then_back_nothing_twice_nothing_lost",
    "bindings.http-kafka/proxy.routes[].when[].method":
        f"{WRITES}::test_respond_async_then_a_get_of_the_location_waits_for_the_reply",
    "bindings.http-kafka/proxy.routes[].when[].path":
        f"{WRITES}::test_fetch_one_item_etag_404_and_wait",
    "bindings.http-kafka/proxy.routes[].with.capability":
        f"{WRITE_CONFIG}::test_a_route_without_with_and_a_capability_zilla_lacks",
    "bindings.http-kafka/proxy.routes[].with.topic":
        f"{WRITES}::test_produce_without_reply_is_204_and_the_record_is_zillas",
    "bindings.http-kafka/proxy.routes[].with.acks": WRITE_OPTIONS,
    "bindings.http-kafka/proxy.routes[].with.key":
        f"{WRITES}::test_produce_without_reply_is_204_and_the_record_is_zillas",
    "bindings.http-kafka/proxy.routes[].with.overrides":
        f"{WRITES}::test_a_guarded_write_needs_its_role",
    "bindings.http-kafka/proxy.routes[].with.reply-to":
        f"{WRITES}::test_produce_with_reply_answers_the_reply",
    "bindings.http-kafka/proxy.routes[].with.correlation-id": WRITE_OPTIONS,
    "bindings.http-kafka/proxy.routes[].with.async":
        f"{WRITES}::test_respond_async_then_a_get_of_the_location_waits_for_the_reply",
    "bindings.http-kafka/proxy.routes[].with.filters":
        f"{WRITES}::test_a_filtered_fetch_by_identity",
    "bindings.http-kafka/proxy.routes[].with.filters[].key":
        f"{WRITES}::test_fetch_one_item_etag_404_and_wait",
    "bindings.http-kafka/proxy.routes[].with.filters[].headers":
        f"{WRITES}::test_a_filtered_fetch_by_identity",
    "bindings.http-kafka/proxy.routes[].with.merge":
        f"{WRITES}::test_fetch_merged_with_etag_304_and_long_poll",
    "bindings.http-kafka/proxy.routes[].with.merge.content-type":
        f"{WRITES}::test_fetch_merged_with_etag_304_and_long_poll",
    "bindings.http-kafka/proxy.routes[].with.merge.patch": WRITE_OPTIONS,
    "bindings.http-kafka/proxy.routes[].with.merge.patch.initial": WRITE_OPTIONS,
    "bindings.http-kafka/proxy.routes[].with.merge.patch.path": WRITE_OPTIONS,
    "bindings.http-kafka/proxy.options.internal-topics":
        f"{AUDIT}::test_connect_and_internal_topics_are_404_to_every_binding",
    "bindings.http-kafka/proxy.options.idempotency.max-length": WRITE_OPTIONS,
    "bindings.http-kafka/proxy.options.idempotency.max-bytes":
        "bindings/http_kafka/test_replay.py::"
        "test_what_the_table_holds_is_bounded_in_bytes_not_only_in_entries",
    "bindings.http-kafka/proxy.options.location-secret":
        f"{AUDIT}::test_a_location_answers_only_its_path_and_identity_and_never_reaches_the_log",
    "bindings.http-kafka/proxy.routes[].with.request-headers":
        f"{AUDIT}::test_a_client_header_never_pre_empts_an_override_nor_carries_a_secret",
    "bindings.http-kafka/proxy.routes[].with.request-headers.copy":
        "bindings/http_kafka/test_headers.py::test_a_route_lists_what_to_copy_and_what_never_to",
    "bindings.http-kafka/proxy.routes[].with.request-headers.never":
        "bindings/http_kafka/test_headers.py::test_a_route_lists_what_to_copy_and_what_never_to",
    "bindings.http-kafka/proxy.routes[].with.content-types":
        f"{AUDIT}::test_a_writers_html_is_served_back_as_bytes_that_nothing_runs",
    "bindings.kafka/client.options.producer-properties":
        f"{PRODUCER}::test_producers_take_the_consumers_servers_and_security_and_nothing_"
        f"consumer_only",
    "bindings.kafka/client.options.max-inflight-bytes":
        f"{PRODUCER}::test_a_record_over_the_inflight_bound_is_refused_before_it_is_queued",
    "bindings.kafka/client.options.servers": "e2e/test_lifecycle.py::test_broker_down_at_start",
    "bindings.kafka/client.options.sasl": SASL,
    "bindings.kafka/client.options.sasl.mechanism": SASL,
    "bindings.kafka/client.options.sasl.username": SASL,
    "bindings.kafka/client.options.sasl.password": SASL,
    # Zilla's http.kafka.oneway: SASL from an inline guard, what librdkafka is handed
    **{f"bindings.kafka/client.options.authorization{key}":
       "bindings/kafka/test_authorization_and_tls.py::"
       "test_the_guard_s_credentials_and_the_vault_s_trust_reach_librdkafka"
       for key in ("", ".<name>.credentials", ".<name>.credentials.mechanism",
                   ".<name>.credentials.username", ".<name>.credentials.password")},
    "bindings.kafka/client.options.max-history-reads":
        "reliability/test_slow_clients.py::test_history_reads_waiting_are_bounded_and_a_stream_waits_its_turn",
    "bindings.kafka/client.options.stall-timeout":
        "reliability/test_stalled_consumer.py::"
        "test_a_consumer_whose_fetches_stopped_is_replaced_and_nothing_is_lost",
    "bindings.kafka/client.options.properties":
        "telemetry/test_kafka_metrics.py::test_consumer_lag_rises_while_behind_then_returns_to_zero",
    "vaults.*.type": f"{TLS}::test_seed_config_sni_and_alpn",
    "vaults.*.options": f"{TLS}::test_seed_config_sni_and_alpn",
    "vaults.*.options.keys": f"{TLS}::test_sni_picks_the_key_unknown_names_get_the_first",
    "vaults.*.options.keys.store": f"{TLS}::test_sni_picks_the_key_unknown_names_get_the_first",
    "vaults.*.options.keys.type": f"{TLS}::test_sni_picks_the_key_unknown_names_get_the_first",
    "vaults.*.options.keys.password": "vaults/test_vault.py::test_wrong_password_is_a_store_error",
    "vaults.*.options.trust": f"{TLS}::test_mutual_required",
    "vaults.*.options.trust.store": f"{TLS}::test_mutual_required",
    "vaults.*.options.trust.type": f"{TLS}::test_mutual_required",
    "vaults.*.options.trust.password": f"{TLS}::test_mutual_required",
    "vaults.*.options.signers": SIGNERS,
    "vaults.*.options.signers.store": SIGNERS,
    "vaults.*.options.signers.type": SIGNERS,
    "vaults.*.options.signers.password": SIGNERS,
    "telemetry.attributes": TELEMETRY,
    "telemetry.metrics": TELEMETRY,
    "telemetry.exporters": "telemetry/test_events.py::test_reload_failure_broker_outage_and_unreadable_id",
    "telemetry.exporters.<name>.type":
        "telemetry/test_events.py::test_reload_failure_broker_outage_and_unreadable_id",
    "telemetry.exporters.<name>.options": TELEMETRY,
    "telemetry.exporters.<name>.options (prometheus)": TELEMETRY,
    "telemetry.exporters.<name>.options.endpoints (prometheus)": TELEMETRY,
    "telemetry.exporters.<name>.options.endpoints[].scheme (prometheus)": TELEMETRY,
    "telemetry.exporters.<name>.options.endpoints[].host (prometheus)": TELEMETRY,
    "telemetry.exporters.<name>.options.endpoints[].port (prometheus)": TELEMETRY,
    "telemetry.exporters.<name>.options.endpoints[].path (prometheus)": TELEMETRY,
    "telemetry.exporters.<name>.options (stdout)": f"{REFUSED}[stdout-interval]",
    "telemetry.exporters.<name>.options.format (stdout)":
        "telemetry/test_log_formats.py::test_every_line_of_a_daemons_output_parses",
    "engine": "e2e/test_workers.py::test_one_scrape_sums_the_workers",
    "bindings.http/server.options.health":
        "e2e/test_health.py::test_readiness_is_503_until_bootstrap_is_loaded_once_and_stays_200_"
        "without_the_broker",
    "bindings.http/server.options.health.liveness":
        "bindings/http/test_health.py::test_probes_on_the_configured_paths_before_routing",
    "bindings.http/server.options.health.readiness":
        "bindings/http/test_health.py::test_probes_on_the_configured_paths_before_routing",
    "bindings.http/server.options.health.details":
        "bindings/http/test_health.py::"
        "test_readiness_tells_its_status_only_unless_details_are_asked_for",
    "catalogs.*.type": MODELS,
    "catalogs.*.options": MODELS,
    "catalogs.*.options (inline)": MODELS,
    "catalogs.*.options.subjects (inline)": MODELS,
    "catalogs.*.options.subjects.<name>.schema (inline)": MODELS,
    "catalogs.*.options.subjects.<name>.version (inline)": CATALOG_UNITS,
    "catalogs.*.options (filesystem)": CATALOG_UNITS,
    "catalogs.*.options.subjects (filesystem)": CATALOG_UNITS,
    "catalogs.*.options.subjects.<name>.path (filesystem)": f"{CATALOG_ERRORS}[missing-schema-file]",
    "catalogs.*.options.subjects.<name>.version (filesystem)": CATALOG_UNITS,
    "catalogs.*.options (schema-registry)": REGISTRY_DOWN,
    "catalogs.*.options.url (schema-registry)": AVRO,
    "catalogs.*.options.context (schema-registry)": CATALOG_UNITS,
    "catalogs.*.options.cache-ttl (schema-registry)": TTL,
    "catalogs.*.options.max-age (schema-registry)": CATALOG_UNITS,
    "bindings.kafka/cache_server.options.topics[].value": MODELS,
    "bindings.kafka/cache_server.options.topics[].value.model": MODELS,
    "bindings.kafka/cache_server.options.topics[].value.view": AVRO,
    "bindings.kafka/cache_server.options.topics[].value.catalog": MODELS,
    "bindings.kafka/cache_server.options.topics[].key": KEY_MODEL,
    "bindings.kafka/cache_server.options.topics[].key.model": KEY_MODEL,
    "bindings.kafka/cache_server.options.topics[].key.view": KEY_MODEL,
    "bindings.kafka/cache_server.options.topics[].key.catalog": KEY_MODEL,
    "bindings.kafka/cache_client.options.topics": WRITE_AVRO,
    "bindings.kafka/cache_client.options.topics[].name": WRITE_AVRO,
    "bindings.kafka/cache_client.options.topics[].value": WRITE_AVRO,
    "bindings.kafka/cache_client.options.topics[].value.model": WRITE_PROTO,
    "bindings.kafka/cache_client.options.topics[].value.view": WRITE_AVRO,
    "bindings.kafka/cache_client.options.topics[].value.catalog": WRITE_PROTO,
    "bindings.kafka/cache_client.options.topics[].key": WRITE_KEY,
    "bindings.kafka/cache_client.options.topics[].key.model": WRITE_KEY,
    "bindings.kafka/cache_client.options.topics[].key.view": WRITE_KEY,
    "bindings.kafka/cache_client.options.topics[].key.catalog": WRITE_KEY,
    "bindings.http/server.options.asyncapi": MODELS,
    "bindings.http/server.options.asyncapi.path": MODELS,
    "telemetry.exporters.<name>.options (otlp)": OTLP,
    "telemetry.exporters.<name>.options.interval (otlp)": OTLP_DOWN,
    "telemetry.exporters.<name>.options.signals (otlp)": OTLP_SIGNALS,
    "telemetry.exporters.<name>.options.endpoint (otlp)": OTLP,
    "telemetry.exporters.<name>.options.endpoint.protocol (otlp)": OTLP,
    "telemetry.exporters.<name>.options.endpoint.location (otlp)": OTLP,
    "telemetry.exporters.<name>.options.endpoint.overrides (otlp)": OTLP_SIGNALS,
    "telemetry.exporters.<name>.options.endpoint.overrides.metrics (otlp)": OTLP_SIGNALS,
    "telemetry.exporters.<name>.options.endpoint.overrides.logs (otlp)": OTLP_SIGNALS,
    "bindings.openapi/server.options.specs": OAPI_PROXY,
    "bindings.openapi/server.options.specs.<name>.servers": OAPI_PROXY,
    "bindings.openapi/server.options.specs.<name>.catalog": OAPI_PROXY,
    "bindings.openapi/server.options.specs.<name>.catalog.<name>.subject": OAPI_PROXY,
    "bindings.openapi/server.options.specs.<name>.catalog.<name>.version": OAPI_ROUTES,
    "bindings.openapi/server.options.specs.<name>.security": OAPI_SECURITY,
    "bindings.openapi/server.routes[].when[].spec": OAPI_ROUTES,
    "bindings.openapi/server.routes[].when[].operation": OAPI_ROUTES,
    "bindings.openapi/server.routes[].when[].tag": OAPI_ROUTES,
    "bindings.openapi/client.options.specs": OAPI_PROXY,
    "bindings.openapi/client.options.specs.<name>.servers": OAPI_PROXY,
    "bindings.openapi/client.options.specs.<name>.catalog": OAPI_PROXY,
    "bindings.openapi/client.options.specs.<name>.catalog.<name>.subject": OAPI_PROXY,
    "bindings.openapi/client.options.specs.<name>.catalog.<name>.version": OAPI_CLIENT,
    "bindings.openapi-asyncapi/proxy.options.specs": OAPI_KAFKA,
    "bindings.openapi-asyncapi/proxy.options.specs.openapi": OAPI_KAFKA,
    "bindings.openapi-asyncapi/proxy.options.specs.openapi.<name>.catalog": OAPI_KAFKA,
    "bindings.openapi-asyncapi/proxy.options.specs.openapi.<name>.catalog.<name>.subject":
        OAPI_KAFKA,
    "bindings.openapi-asyncapi/proxy.options.specs.openapi.<name>.catalog.<name>.version":
        OAPI_ROUTES,
    "bindings.openapi-asyncapi/proxy.options.specs.openapi.<name>.security": OAPI_SECURITY,
    "bindings.openapi-asyncapi/proxy.options.specs.asyncapi": OAPI_KAFKA,
    "bindings.openapi-asyncapi/proxy.options.specs.asyncapi.<name>.catalog": OAPI_KAFKA,
    "bindings.openapi-asyncapi/proxy.options.specs.asyncapi.<name>.catalog.<name>.subject":
        OAPI_KAFKA,
    "bindings.openapi-asyncapi/proxy.options.specs.asyncapi.<name>.catalog.<name>.version":
        OAPI_ROUTES,
    "bindings.openapi-asyncapi/proxy.routes[].when[].spec": OAPI_KAFKA,
    "bindings.openapi-asyncapi/proxy.routes[].when[].operation": OAPI_ROUTES,
    "bindings.openapi-asyncapi/proxy.routes[].when[].tag": OAPI_ROUTES,
    "bindings.openapi-asyncapi/proxy.routes[].with.spec": OAPI_KAFKA,
    "bindings.openapi-asyncapi/proxy.routes[].with.operation": OAPI_ROUTES,
    "bindings.openapi-asyncapi/proxy.routes[].with.tag": OAPI_ROUTES,
    "bindings.asyncapi/server.options.specs": AAPI,
    "bindings.asyncapi/server.options.specs.<name>.servers": AAPI_TLS,
    "bindings.asyncapi/server.options.specs.<name>.catalog": AAPI,
    "bindings.asyncapi/server.options.specs.<name>.catalog.<name>.subject": AAPI,
    "bindings.asyncapi/server.options.specs.<name>.catalog.<name>.version": AAPI_VERSION,
    "bindings.asyncapi/server.options.specs.<name>.security": AAPI_GUARDED,
    "bindings.asyncapi/server.routes[].when[].spec": AAPI_SERVER_ROUTES,
    "bindings.asyncapi/server.routes[].when[].operation": AAPI_SERVER_ROUTES,
    "bindings.asyncapi/server.routes[].when[].tag": AAPI_SERVER_ROUTES,
    "bindings.asyncapi/proxy.options.specs": AAPI,
    "bindings.asyncapi/proxy.options.specs.<name>.servers": AAPI_PATHNAME,
    "bindings.asyncapi/proxy.options.specs.<name>.catalog": AAPI,
    "bindings.asyncapi/proxy.options.specs.<name>.catalog.<name>.subject": AAPI,
    "bindings.asyncapi/proxy.options.specs.<name>.catalog.<name>.version": AAPI_VERSION,
    "bindings.asyncapi/proxy.options.specs.<name>.security": AAPI_GUARDED,
    "bindings.asyncapi/proxy.routes[].when[].spec": AAPI_PROXY_ROUTES,
    "bindings.asyncapi/proxy.routes[].when[].operation": AAPI_PROXY_ROUTES,
    "bindings.asyncapi/proxy.routes[].when[].tag": AAPI_PROXY_ROUTES,
    "bindings.asyncapi/proxy.routes[].with.spec": AAPI,
    "bindings.asyncapi/proxy.routes[].with.operation": AAPI_PROXY_ROUTES,
    "bindings.asyncapi/client.options.specs": AAPI,
    "bindings.asyncapi/client.options.specs.<name>.servers": AAPI,
    "bindings.asyncapi/client.options.specs.<name>.catalog": AAPI,
    "bindings.asyncapi/client.options.specs.<name>.catalog.<name>.subject": AAPI,
    "bindings.asyncapi/client.options.specs.<name>.catalog.<name>.version": AAPI_VERSION,
}


def schema_paths() -> Iterator[str]:
    """Every key of the composed schema: top level, every binding, each kind's options, `when`
    and `with`, and the vault, guard, telemetry and catalog files."""
    registry = discover()
    files = schema_files()
    yield from files["ssekd:zilla"]["properties"]
    generic = _generic_binding(ssekd_types(registry))
    for row in rows(generic, generic):
        yield f"bindings.*.{row.path}"
    for t in ssekd_types(registry):
        for kind_name, kind in t.kinds.items():
            prefix = f"bindings.{t.name}/{kind_name}."
            for part, schema in (("options", kind.options), ("routes[].when[]", kind.when),
                                 ("routes[].with", kind.with_)):
                if schema is None:
                    continue
                found = list(rows(schema, schema))
                if not found:  # a mapping with no keys: what it accepts is still a key
                    yield prefix + part
                for row in found:
                    yield f"{prefix}{part}.{row.path}" + \
                        (f" ({row.only_for})" if row.only_for else "")
    for prefix, uri in (("vaults.*.", "ssekd:vault/filesystem"), ("guards.*.", "ssekd:guard/jwt"),
                        ("telemetry.", "ssekd:telemetry"), ("catalogs.*.", "ssekd:catalog")):
        for row in rows(files[uri], files[uri]):
            yield prefix + row.path + (f" ({row.only_for})" if row.only_for else "")


@cache
def _defined(file: str) -> tuple[set[str], str]:
    path = TESTS / file
    text = path.read_text(encoding="utf-8")
    names = {n.name for n in ast.parse(text).body if isinstance(n, ast.FunctionDef)}
    return names, text


def test_every_schema_key_has_a_behaviour_or_refusal_test() -> None:
    paths = list(schema_paths())
    assert len(paths) > 100, "the walk found too few keys to mean anything"
    # every key of a guard entry is shown by the guarded end-to-end test, like `guards` itself
    missing = [p for p in paths if p not in COVERAGE and not p.startswith("guards.")]
    assert missing == [], "keys with neither a behaviour nor a refusal test:\n" + \
        "\n".join(missing)
    stale = sorted(set(COVERAGE) - set(paths))
    assert stale == [], f"COVERAGE names keys the schema does not have: {stale}"


def test_every_listed_test_exists() -> None:
    for key, where in COVERAGE.items():
        m = re.fullmatch(r"([\w/]+\.py)::(\w+)(?:\[([\w-]+)\])?", where)
        assert m is not None, (key, where)
        names, text = _defined(m[1])
        assert m[2] in names, f"{key}: no {m[2]} in tests/{m[1]}"
        if m[3]:
            assert f'("{m[3]}"' in text, f"{key}: no case {m[3]!r} in tests/{m[1]}"
