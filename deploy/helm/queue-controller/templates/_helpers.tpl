{{/* The chart name, or nameOverride. */}}
{{- define "queue-controller.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/* The full name: fullnameOverride, else the release name if it contains the chart name,
     else "<release>-<chart>". */}}
{{- define "queue-controller.fullname" -}}
{{- if .Values.fullnameOverride }}
{{- .Values.fullnameOverride | trunc 63 | trimSuffix "-" }}
{{- else }}
{{- $name := default .Chart.Name .Values.nameOverride }}
{{- if contains $name .Release.Name }}
{{- .Release.Name | trunc 63 | trimSuffix "-" }}
{{- else }}
{{- printf "%s-%s" .Release.Name $name | trunc 63 | trimSuffix "-" }}
{{- end }}
{{- end }}
{{- end }}

{{- define "queue-controller.chart" -}}
{{- printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" }}
{{- end }}

{{- define "queue-controller.selectorLabels" -}}
app.kubernetes.io/name: {{ include "queue-controller.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end }}

{{- define "queue-controller.labels" -}}
helm.sh/chart: {{ include "queue-controller.chart" . }}
{{ include "queue-controller.selectorLabels" . }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
app.kubernetes.io/part-of: queue-controller
{{- end }}

{{- define "queue-controller.serviceAccountName" -}}
{{- default (include "queue-controller.fullname" .) .Values.serviceAccount.name }}
{{- end }}

{{- define "queue-controller.leaseName" -}}
{{- default (include "queue-controller.fullname" .) .Values.leaderElection.leaseName }}
{{- end }}

{{- define "queue-controller.webhookService" -}}
{{- printf "%s-webhook" (include "queue-controller.fullname" .) | trunc 63 | trimSuffix "-" }}
{{- end }}

{{- define "queue-controller.metricsService" -}}
{{- printf "%s-metrics" (include "queue-controller.fullname" .) | trunc 63 | trimSuffix "-" }}
{{- end }}

{{- define "queue-controller.webhookCertSecret" -}}
{{- printf "%s-webhook-cert" (include "queue-controller.fullname" .) | trunc 63 | trimSuffix "-" }}
{{- end }}

{{- define "queue-controller.image" -}}
{{- printf "%s:%s" .Values.image.repository (default .Chart.AppVersion .Values.image.tag) }}
{{- end }}

{{/* Where the controller reads tls.crt, tls.key and ca.crt (QC_WEBHOOK_CERT_DIR). */}}
{{- define "queue-controller.webhookCertDir" -}}
/etc/queue-controller/webhook
{{- end }}

{{/* The directory of a sqlite:////abs/path URL, for the journal volume's mount. */}}
{{- define "queue-controller.journalDir" -}}
/var/lib/queue-controller
{{- end }}

{{/* Settings the `settings` map may set; the chart sets every other one itself. */}}
{{- define "queue-controller.extraSettings" -}}
tickSeconds batchSeconds cyclePeriodSeconds podsReadyTimeoutSeconds creationBacklogPods statusWritesPerCycle dcgmUrls dcgmIntervalSeconds gpuClearSeconds gpuTaint idleThreshold idleWindowSeconds maxReservations historyMinGangs historyRefreshSeconds
{{- end }}

{{/* The DNS names the webhook Service answers to. */}}
{{- define "queue-controller.webhookDNSNames" -}}
{{- $svc := include "queue-controller.webhookService" . }}
{{- $ns := .Release.Namespace }}
{{- list $svc (printf "%s.%s" $svc $ns) (printf "%s.%s.svc" $svc $ns) (printf "%s.%s.svc.cluster.local" $svc $ns) | toJson }}
{{- end }}

{{/* managedJobsNamespaceSelector (a LabelSelector) as the selector string of
     QC_MANAGED_NAMESPACE_SELECTOR (queue_controller/kube/kinds/selectors.py reads it):
     matchLabels as key=value, then In, NotIn, Exists, DoesNotExist as the API writes them.
     Empty when the selector is empty: managed namespaces off. */}}
{{- define "queue-controller.managedNamespaceSelector" -}}
{{- $selector := .Values.managedJobsNamespaceSelector | default dict }}
{{- $parts := list }}
{{- range $key, $value := $selector.matchLabels }}
{{- $parts = append $parts (printf "%s=%s" $key (toString $value)) }}
{{- end }}
{{- range $expression := $selector.matchExpressions }}
{{- $op := $expression.operator }}
{{- if eq $op "In" }}
{{- $parts = append $parts (printf "%s in (%s)" $expression.key (join "," $expression.values)) }}
{{- else if eq $op "NotIn" }}
{{- $parts = append $parts (printf "%s notin (%s)" $expression.key (join "," $expression.values)) }}
{{- else if eq $op "Exists" }}
{{- $parts = append $parts $expression.key }}
{{- else if eq $op "DoesNotExist" }}
{{- $parts = append $parts (printf "!%s" $expression.key) }}
{{- else }}
{{- fail (printf "managedJobsNamespaceSelector.matchExpressions: operator %q is none of In, NotIn, Exists, DoesNotExist" (toString $op)) }}
{{- end }}
{{- end }}
{{- join "," $parts }}
{{- end }}
