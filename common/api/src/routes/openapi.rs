//! The OpenAPI 3.1 document, built from the route table.

use super::table::table;

/// The OpenAPI 3.1 document of [`table`].
pub fn openapi() -> serde_json::Value {
    let mut paths = serde_json::Map::new();
    for o in table() {
        let params: Vec<serde_json::Value> = o
            .doc
            .split(['{', '}'])
            .skip(1)
            .step_by(2)
            .map(|p| serde_json::json!({ "name": p, "in": "path", "required": true, "schema": { "type": "string" } }))
            .collect();
        let entry = paths
            .entry(o.doc.to_string())
            .or_insert_with(|| serde_json::json!({}));
        let ok_description = match o.ok {
            201 => "Created",
            202 => "Accepted; observe the job at Location",
            204 => "No content",
            101 => "Switching protocols (WebSocket)",
            _ => "OK",
        };
        entry[o.method.as_str().to_ascii_lowercase()] = serde_json::json!({
            "summary": o.summary,
            "tags": [o.tag],
            "operationId": format!("{}_{}", o.method.as_str().to_ascii_lowercase(), o.doc.trim_start_matches('/').replace(['/', '{', '}', ':', '.', '-'], "_")),
            "parameters": params,
            "responses": {
                o.ok.to_string(): { "description": ok_description },
                "default": { "description": "An error", "content": { "application/problem+json": { "schema": { "$ref": "#/components/schemas/Problem" } } } },
            },
        });
    }
    serde_json::json!({
        "openapi": "3.1.0",
        "info": { "title": "Tessera API (sfmapi v1)", "version": env!("CARGO_PKG_VERSION") },
        "paths": paths,
        "components": {
            "schemas": {
                "Problem": {
                    "type": "object",
                    "required": ["type", "title", "status"],
                    "properties": {
                        "type": { "type": "string" }, "title": { "type": "string" },
                        "status": { "type": "integer" }, "detail": { "type": "string" },
                        "instance": { "type": "string" },
                        "capability": { "type": "string" },
                    },
                },
            },
            "securitySchemes": { "bearer": { "type": "http", "scheme": "bearer" } },
        },
    })
}

pub(super) async fn openapi_json() -> axum::Json<serde_json::Value> {
    axum::Json(openapi())
}
