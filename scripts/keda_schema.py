"""Write deploy/k8s/schemas/keda-scaledobject-v1alpha1.json, the JSON Schema `make k8s-check` validates
the ScaledObjects against, offline.

Its source is KEDA's CRD as the PyPI package cloudcoil-models-keda ships it (pydantic models generated from
KEDA 2.16.1's CustomResourceDefinitions): not a dependency of the project, so run this script in a
throwaway environment, e.g. `uv run --no-project --with cloudcoil-models-keda==2.16.1.0
scripts/keda_schema.py`. Every object that lists its properties is made strict (additionalProperties:
false), as `kubectl apply --validate=strict` is against a structural CRD: a misspelt field is an error,
not a field the API server drops.
"""

from __future__ import annotations

import json
from importlib.metadata import version
from pathlib import Path
from typing import Any

from cloudcoil.models.keda.v1alpha1 import ScaledObject  # type: ignore[import-not-found]

OUT = Path(__file__).resolve().parents[1] / "deploy" / "k8s" / "schemas" / "keda-scaledobject-v1alpha1.json"
#: Free-form on purpose in Kubernetes (managed fields' contents).
FREE_FORM = {"FieldsV1"}


def strict(schema: dict[str, Any]) -> dict[str, Any]:
    for name, definition in schema["$defs"].items():
        if "properties" in definition and name not in FREE_FORM:
            definition["additionalProperties"] = False
    schema["additionalProperties"] = False
    schema["required"] = sorted({*schema.get("required", []), "apiVersion", "kind", "spec"})
    return schema


def main() -> None:
    schema = strict(ScaledObject.model_json_schema(by_alias=True))
    source = f"cloudcoil-models-keda {version('cloudcoil-models-keda')}"
    schema = {
        "$comment": f"KEDA ScaledObject (keda.sh/v1alpha1) from {source} (KEDA 2.16.1's CRD); "
        "written by scripts/keda_schema.py",
        **schema,
    }
    OUT.write_text(json.dumps(schema, indent=1, sort_keys=True) + "\n")
    print(f"wrote {OUT}")


if __name__ == "__main__":
    main()
