{{/* Names and CEL shared by the ValidatingAdmissionPolicies (admission-policies.yaml and,
     for the node agent, node-agent.yaml). */}}

{{/* The controller's own user: the one writer every policy lets through. */}}
{{- define "queue-controller.controllerUser" -}}
{{- printf "system:serviceaccount:%s:%s" .Release.Namespace (include "queue-controller.serviceAccountName" .) }}
{{- end }}

{{- define "queue-controller.nodeAgent.user" -}}
{{- printf "system:serviceaccount:%s:%s" .Release.Namespace (include "queue-controller.nodeAgent.serviceAccountName" .) }}
{{- end }}

{{/* A matchCondition that skips the policy for the controller's own requests. */}}
{{- define "queue-controller.policy.notTheController" -}}
- name: not-the-controller
  expression: "request.userInfo.username != '{{ include "queue-controller.controllerUser" . }}'"
{{- end }}

{{/* The queue labels (queue_controller/kube/kinds/base.py QUEUE_LABELS), as a CEL list. */}}
{{- define "queue-controller.policy.queueLabels" -}}
['queue-controller.io/queue', 'kueue.x-k8s.io/queue-name']
{{- end }}

{{/* The admission scheduling gate (queue_controller/kube/resources.py ADMISSION_GATE). */}}
{{- define "queue-controller.policy.gate" -}}
queue-controller.io/admission
{{- end }}

{{/* CEL: whether the pod spec given as the argument asks for an accelerator: an extended
     resource (the controller's is_extended, core/resources.py: a domain-prefixed name outside
     kubernetes.io that is not a quota requests. name) in any container's requests or limits,
     or a DRA resource claim. */}}
{{- define "queue-controller.policy.asksAccelerator" -}}
({{ . }}.containers + {{ . }}.?initContainers.orValue([])).exists(c, c.?resources.?requests.orValue({}).exists(n, n.contains('/') && !n.contains('kubernetes.io/') && !n.startsWith('requests.')) || c.?resources.?limits.orValue({}).exists(n, n.contains('/') && !n.contains('kubernetes.io/') && !n.startsWith('requests.'))) || {{ . }}.?resourceClaims.orValue([]).size() > 0
{{- end }}

{{/* A binding's matchResources: the policies' namespaces (admissionPolicies.namespaceSelector)
     or, given a selector as the argument's second item, that one. */}}
{{- define "queue-controller.policy.binding" -}}
{{- $root := index . 0 }}
{{- $name := index . 1 }}
{{- $selector := index . 2 }}
apiVersion: admissionregistration.k8s.io/v1
kind: ValidatingAdmissionPolicyBinding
metadata:
  name: {{ $name }}
  labels:
    {{- include "queue-controller.labels" $root | nindent 4 }}
spec:
  policyName: {{ $name }}
  validationActions: [Deny]
  {{- /* matchLabels values as strings: `managed: true` in a values file is a bool in YAML,
       and the API server wants a string (as in webhook.yaml). */}}
  {{- with $selector }}
  matchResources:
    namespaceSelector:
      {{- with .matchLabels }}
      matchLabels:
        {{- range $key, $value := . }}
        {{ $key | quote }}: {{ toString $value | quote }}
        {{- end }}
      {{- end }}
      {{- with .matchExpressions }}
      matchExpressions:
        {{- toYaml . | nindent 8 }}
      {{- end }}
  {{- end }}
{{- end }}
