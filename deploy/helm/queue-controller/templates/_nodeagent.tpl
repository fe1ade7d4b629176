{{/* The GPU node agent's names and labels. Its pods carry their own app.kubernetes.io/name,
     so that the controller's selectors (Deployment, metrics Service, PodDisruptionBudget),
     which match name and instance only, never take them in. */}}
{{- define "queue-controller.nodeAgent.fullname" -}}
{{- printf "%s-node-agent" (include "queue-controller.fullname" .) | trunc 63 | trimSuffix "-" }}
{{- end }}

{{- define "queue-controller.nodeAgent.selectorLabels" -}}
app.kubernetes.io/name: {{ printf "%s-node-agent" (include "queue-controller.name" .) | trunc 63 | trimSuffix "-" }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end }}

{{- define "queue-controller.nodeAgent.labels" -}}
helm.sh/chart: {{ include "queue-controller.chart" . }}
{{ include "queue-controller.nodeAgent.selectorLabels" . }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
app.kubernetes.io/part-of: queue-controller
app.kubernetes.io/component: node-agent
{{- end }}

{{- define "queue-controller.nodeAgent.serviceAccountName" -}}
{{- default (include "queue-controller.nodeAgent.fullname" .) .Values.nodeAgent.serviceAccount.name }}
{{- end }}

{{/* The agent is the same program as the controller: its image unless one is given. */}}
{{- define "queue-controller.nodeAgent.image" -}}
{{- $image := .Values.nodeAgent.image }}
{{- $repository := default .Values.image.repository $image.repository }}
{{- $tag := default (default .Chart.AppVersion .Values.image.tag) $image.tag }}
{{- printf "%s:%s" $repository $tag }}
{{- end }}
